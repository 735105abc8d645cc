package cm

// Time is a point in time in nanoseconds on its driver's clock (monotonic
// or virtual), as qp.Time is.
type Time int64

// Millisecond is a Time span.
const Millisecond Time = 1_000_000

// convert turns a CM timeout exponent into a span: 4.096 us * 2^t, which the
// kernel rounds to 1 << (t-8) ms (cm_convert_to_ms) and so does this.
func convert(t uint8) Time {
	if t > 31 {
		t = 31
	}
	if t <= 8 {
		return Millisecond
	}
	return Time(1<<(t-8)) * Millisecond
}

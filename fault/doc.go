// Package fault decides, frame by frame and from a seed, what an unreliable
// network does to traffic: loss (independent and bursty), duplication, delay
// with jitter, reordering and bit corruption.
//
// It does no I/O and reads no clock: a Model only answers "what happens to
// this frame", so the same models drive the link middleware (real time) and
// the simulator (virtual time), and the same seed always gives the same
// decisions on every machine (all arithmetic is integer; no floating point
// whose rounding could differ between architectures).
//
// # Spec grammar
//
// A Spec is written as comma-separated key=value items, in any order, each key
// at most once; spaces around items are ignored and the empty string is the
// perfect network:
//
//	spec    = [ item { "," item } ]
//	item    = "loss=" prob | "dup=" prob | "reorder=" prob |
//	          "reorder_delay=" dur | "corrupt=" prob | "bits=" int |
//	          "delay=" dur | "jitter=" dur | "burst=" burst | "seed=" uint
//	prob    = decimal "%" | decimal        ; "2%" and "0.02" are the same; 0..100% / 0..1
//	dur     = Go duration                  ; "100us", "1.5ms", "0"; not negative
//	burst   = "gilbert:p=" prob ":r=" prob [ ":bad=" prob ] [ ":good=" prob ]
//
// Probabilities are exact to 1e-9 (a finer one is an error, not rounded).
// The meaning of each item:
//
//   - loss: each frame is lost independently with this probability.
//   - burst: a Gilbert-Elliott two-state channel, stepped once per frame:
//     in the good state it moves to bad with probability p, in the bad state
//     back to good with probability r. A frame sent in the bad state is lost
//     with probability bad (default 100%), in the good state with
//     probability good (default 0). With the defaults bursts last 1/r frames
//     on average and the long-run loss is p/(p+r). Burst loss adds to "loss".
//   - dup: a delivered frame is delivered twice; each copy gets its own
//     delay and corruption decision.
//   - delay, jitter: each copy is delayed by delay plus a uniform amount in
//     [-jitter, +jitter], clamped at zero.
//   - reorder: this fraction of copies gets an extra delay uniform in
//     (0, reorder_delay] (default DefaultReorderDelay), so that frames sent
//     after it overtake it.
//   - corrupt: this fraction of copies has between 1 and bits (default 1,
//     at most MaxFlipBits) distinct random bits flipped within the byte range
//     the caller names. The ICRC (CRC-32) catches every error of up to three
//     bits in frames up to 11 KiB, so with bits<=3 every corrupted frame is
//     rejected by the receiver.
//   - seed: the seed the spec asks for; New takes the seed explicitly, so a
//     caller decides whether the spec's seed or one of its own wins.
//
// Spec.String writes the canonical form, which Parse reads back to an equal
// Spec.
//
// # Randomness
//
// Rand is a PCG generator (math/rand/v2, whose output for a given seed is
// stable across Go releases). Stream(seed, name) derives independent streams
// from one master seed by hashing a component name, as deterministic
// simulators split one logged seed per subsystem. Within a Model each fault
// component draws from its own stream, and the per-frame draws of loss, burst
// and dup happen whatever their outcome, so that enabling duplication does
// not change which frames are lost.
package fault

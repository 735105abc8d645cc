#!/usr/bin/bash
# Command server of the interop guest, on /dev/ttyS1 (a unix socket on the
# host). Requests are lines "ID TIMEOUT BASE64(script)"; each runs in the
# background under bash in its own session, is killed (whole process group)
# after TIMEOUT seconds, and answers with one line
# "=== RES ID rc=N BASE64(combined output)". Answers are written under a lock
# so concurrent commands never interleave. The line "=== RXEVM READY" is sent
# once at start so the host knows the loop listens. The line "kill ID" kills
# command ID's process group (its answer then says rc=137). "ID 0 poweroff" style
# requests are just scripts: `poweroff -f` ends the VM.
tty=/dev/ttyS1
stty -F "$tty" raw -echo 2>/dev/null
exec 3<>"$tty"
printf '=== RXEVM READY %s\n' "$1" >&3

run() {
	local id=$1 tmo=$2 b64=$3 dir=/tmp/cmd.$1
	mkdir -p "$dir"
	printf '%s' "$b64" | base64 -d >"$dir/script"
	setsid bash "$dir/script" >"$dir/out" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$dir/pid"
	(sleep "$tmo"; kill -KILL -- "-$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null) &
	local dog=$!
	wait "$pid"
	local rc=$?
	kill "$dog" 2>/dev/null
	{
		printf '=== RES %s rc=%d ' "$id" "$rc"
		base64 -w0 <"$dir/out"
		printf '\n'
	} >"$dir/res"
	until mkdir /tmp/res.lock 2>/dev/null; do sleep 0.01; done
	cat "$dir/res" >&3
	rmdir /tmp/res.lock
	rm -rf "$dir"
}

while IFS=' ' read -r id tmo b64 <&3; do
	id=${id//$'\r'/}
	b64=${b64//$'\r'/}
	if [ "$id" = kill ]; then # "kill ID": kill command ID's process group
		p=$(cat "/tmp/cmd.$tmo/pid" 2>/dev/null) && kill -KILL -- "-$p" 2>/dev/null
		continue
	fi
	[ -n "$id" ] && [ -n "$b64" ] || continue
	run "$id" "$tmo" "$b64" &
done

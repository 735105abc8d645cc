#!/bin/sh
# check.sh LIB EXPECTED: LIB exports exactly the symbols and versions listed
# in EXPECTED (the output of symbols.sh on the library we replace).
set -eu
here=$(dirname "$0")
"$here/symbols.sh" "$1" > "$1.symbols"
if ! diff -u "$2" "$1.symbols"; then
	echo "check.sh: $1 does not export the same symbols as $2" >&2
	exit 1
fi
echo "check.sh: $1 exports the $(wc -l < "$2") symbols of $2"

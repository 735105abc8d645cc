#!/bin/sh
# symbols.sh LIB: the dynamic symbols LIB defines, one per line, sorted:
#   TYPE NAME@@VERSION   (the default version new links bind to)
#   TYPE NAME@VERSION    (a compatibility version, shown in parentheses by objdump)
# TYPE is F (function) or O (data object). Version-node definitions (*ABS*)
# and undefined (imported) symbols are left out.
set -eu
objdump -T "$1" | awk '
	$0 ~ /\*UND\*/ || $0 ~ /\*ABS\*/ { next }
	NF == 7 && $3 ~ /^D[FO]$/ {
		type = substr($3, 2, 1); ver = $6; name = $7
		if (ver ~ /^\(/) { gsub(/[()]/, "", ver); print type, name "@" ver }
		else print type, name "@@" ver
	}' | LC_ALL=C sort

#!/usr/bin/env bash
# build-image.sh CACHE_DIR: build a kernel + initramfs that boots Debian's
# kernel with rdma_rxe and the rdma-core tools, from Debian packages only.
#
# Output: CACHE_DIR/vmlinuz and CACHE_DIR/initramfs.gz, rebuilt only when the
# kernel package, this script or init.sh changes (CACHE_DIR/image.stamp).
# Host packages it needs are installed with apt-get when missing (root only);
# the kernel .deb is fetched with `apt-get download` into CACHE_DIR/debs.
set -euo pipefail

cache=${1:?usage: build-image.sh CACHE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

# Host tools and the userspace we copy into the guest. ibverbs-providers
# carries librxe; perftest, ibverbs-utils and rdmacm-utils the test programs.
need_pkgs=(qemu-system-x86 busybox-static tcpdump iproute2 ethtool cpio kmod gzip
	ibverbs-utils ibverbs-providers perftest rdmacm-utils libgcc-s1)
missing=()
for p in "${need_pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	if [ "$(id -u)" -ne 0 ]; then
		echo "build-image: missing packages ${missing[*]} and not root" >&2
		exit 1
	fi
	echo "build-image: apt-get install ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The kernel: whatever linux-image-amd64 depends on right now.
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$kpkg" ]; then
	apt-get update -qq
	kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
[ -n "$kpkg" ] || { echo "build-image: cannot resolve linux-image-amd64" >&2; exit 1; }
kver=${kpkg#linux-image-}

stamp="$kpkg $(sha256sum "$0" "$here/init.sh" "$here/cmdloop.sh" | sha256sum | cut -c1-16)"
if [ -f "$cache/image.stamp" ] && [ "$(cat "$cache/image.stamp")" = "$stamp" ] &&
	[ -s "$cache/vmlinuz" ] && [ -s "$cache/initramfs.gz" ]; then
	exit 0
fi

mkdir -p "$cache/debs"
deb=$(ls "$cache/debs/${kpkg}_"*.deb 2>/dev/null | head -n 1 || true)
if [ -z "$deb" ]; then
	echo "build-image: apt-get download $kpkg" >&2
	(cd "$cache/debs" && apt-get download -qq -o APT::Sandbox::User=root "$kpkg")
	deb=$(ls "$cache/debs/${kpkg}_"*.deb | head -n 1)
fi

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
ktree=$work/kernel
dpkg-deb -x "$deb" "$ktree"
# The .deb has no modules.dep.
depmod -b "$ktree" "$kver"

root=$work/root
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc/rxevm,proc,sys,dev,tmp,run,mnt,root,var}
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

# Modules in dependency order (31 on 6.1).
modprobe -a -d "$ktree" -S "$kver" --show-depends \
	crc32_generic virtio_pci virtio_net veth rdma_rxe ib_umad rdma_ucm \
	9pnet_virtio 9p sch_netem sch_htb sch_red bridge tun |
	awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' >"$work/mods.abs"
: >"$root/etc/rxevm/modules.list"
while read -r m; do
	rel=${m#"$ktree"/}
	mkdir -p "$root/$(dirname "$rel")"
	cp "$m" "$root/$rel"
	echo "/$rel" >>"$root/etc/rxevm/modules.list"
done <"$work/mods.abs"

# busybox and its applets (never over a real binary copied below).
cp /bin/busybox "$root/usr/bin/busybox"
for a in $(/bin/busybox --list); do
	[ -e "$root/usr/bin/$a" ] || ln -s busybox "$root/usr/bin/$a"
done

# Programs plus their ldd closure. The rxe provider is dlopen()ed by
# libibverbs and libgcc_s by glibc, so ldd never sees them: add by hand;
# librspreload.so (librdmacm1) is preloaded by hand.
progs=(/usr/bin/bash /usr/sbin/ip /usr/bin/rdma /usr/sbin/tc /usr/sbin/bridge /usr/bin/tcpdump)
for p in ibverbs-utils perftest rdmacm-utils; do
	while read -r f; do progs+=("$f"); done < <(dpkg -L "$p" | grep '^/usr/bin/')
done
libdir=/usr/lib/x86_64-linux-gnu
extra=("$libdir/libibverbs/librxe-rdmav34.so" "$libdir/libgcc_s.so.1" "$libdir/rsocket/librspreload.so")
copy() { # copy a file into the root at the same path, following one symlink level
	local src=$1
	[ -e "$root$src" ] && return 0
	mkdir -p "$root$(dirname "$src")"
	cp -L "$src" "$root$src"
}
for f in "${progs[@]}" "${extra[@]}"; do
	[ -f "$f" ] || continue
	rm -f "$root$f"
	copy "$f"
	{ ldd "$f" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' | while read -r l; do
		copy "$l"
	done
done
mkdir -p "$root/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
cp /etc/protocols /etc/services "$root/etc/" 2>/dev/null || true
printf '/usr/lib/x86_64-linux-gnu\n/usr/lib\n' >"$root/etc/ld.so.conf"
ldconfig -r "$root" 2>/dev/null || true

install -m 0755 "$here/init.sh" "$root/init"
install -m 0755 "$here/cmdloop.sh" "$root/etc/rxevm/cmdloop.sh"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initramfs.gz"
cp "$ktree/boot/vmlinuz-$kver" "$work/vmlinuz"
mv "$work/initramfs.gz" "$cache/initramfs.gz"
mv "$work/vmlinuz" "$cache/vmlinuz"
echo "$stamp" >"$cache/image.stamp"
echo "build-image: $kpkg, $(wc -l <"$root/etc/rxevm/modules.list") modules, initramfs $(du -h "$cache/initramfs.gz" | cut -f1)" >&2

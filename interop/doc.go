// Package interop boots Debian's Linux kernel with its Soft-RoCE driver
// (rdma_rxe) in QEMU and drives it from the host, so that softroce can be
// tested against the real kernel implementation.
//
// Everything comes from Debian packages: build-image.sh installs the host
// tools with apt-get when they are missing, fetches the kernel .deb with
// `apt-get download` into a cache folder, and packs a busybox initramfs with
// the 31 modules rxe needs, iproute2's rdma tool and rdma-core's test programs
// (ibv_*_pingpong, perftest, rping) with their libraries and the rxe
// provider. The guest's PID 1 (init.sh) gives eth0 the address from the kernel
// command line, runs `rdma link add rxe0 type rxe netdev eth0`, waits until
// rxe0 is ACTIVE with its IPv4 GID, and then serves commands on its second
// serial port (cmdloop.sh): each request is a bash script with a timeout,
// each answer its exit status and output.
//
// The host side lives in a network namespace of its own (Net): a bridge with
// the host address, one TAP per VM, and spare TAPs for softroce's tap link.
// Deleting the namespace removes every interface, so nothing outlives a test,
// and no traffic leaves the namespace. Every wait has a timeout.
//
// The tests in this package run only when SOFTROCE_INTEROP=1 (they need root
// and /dev/net/tun); interop/run.sh sets it. Without KVM a boot takes about
// 8-16 s under TCG.
package interop

#!/bin/sh
# PID 1 of the interop guest (busybox sh). Loads the modules listed in
# /etc/rxevm/modules.list, gives eth0 the address from the kernel command line
# (rxe.ip=A/N, rxe.mtu=N, rxe.rxe=0 to skip rxe0), creates rxe0 and waits for
# it to be ACTIVE with its IPv4 GID, then serves commands on /dev/ttyS1
# (cmdloop.sh). Markers go to the console (ttyS0) for the host's log.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
echo "=== RXEVM BOOT"

IP=none MTU=1500 RXE=1 NAME=vm
for w in $(cat /proc/cmdline); do
	case $w in
	rxe.ip=*) IP=${w#rxe.ip=} ;;
	rxe.mtu=*) MTU=${w#rxe.mtu=} ;;
	rxe.rxe=*) RXE=${w#rxe.rxe=} ;;
	rxe.name=*) NAME=${w#rxe.name=} ;;
	esac
done

while read -r m; do
	insmod "$m" || echo "=== RXEVM insmod failed: $m"
done </etc/rxevm/modules.list

# busybox sh would run its own ip applet: call iproute2 by path.
/usr/sbin/ip link set lo up
if [ "$IP" != none ]; then
	i=0
	while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	/usr/sbin/ip link set eth0 mtu "$MTU"
	/usr/sbin/ip addr add "$IP" dev eth0
	/usr/sbin/ip link set eth0 up
	if [ "$RXE" = 1 ]; then
		/usr/bin/rdma link add rxe0 type rxe netdev eth0 || echo "=== RXEVM rdma link add failed"
		i=0
		while [ $i -lt 200 ]; do
			st=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)
			gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)
			case "$st" in *ACTIVE*) case "$gid" in 0000:0000:0000:0000:0000:ffff:*) break ;; esac ;; esac
			sleep 0.1
			i=$((i + 1))
		done
	fi
fi
read -r up _ </proc/uptime
echo "=== RXEVM READY name=$NAME ip=$IP uptime=$up"
exec /usr/bin/bash /etc/rxevm/cmdloop.sh "$NAME"

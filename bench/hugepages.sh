# Sourced by the bench scripts that give a DPDK peer 2 MB huge pages, as
# DPDK runs in production (rte_acl in classbench.sh, rte_hash in
# conntrack-rte-hash.sh): reserves more pages as root and gives the count
# back on exit. Not run on its own.
#
#   source bench/hugepages.sh
#   if hugepages_reserve 1024 1024; then ...huge pages...; else ...4 KB...; fi
#
# hugepages_reserve ADD NEED: as root, raises vm.nr_hugepages by ADD,
# mounts hugetlbfs at /dev/hugepages when none is mounted, and succeeds
# when at least NEED pages are free; the count found is written back by
# hugepages_restore, which it puts in the EXIT trap after the trap the
# caller set (hugepages_trap: that trap's command). Fails, changing
# nothing, when not root.
hugepages_trap=""
hugepages_reserve() {
    local add=$1 need=$2 hp=/proc/sys/vm/nr_hugepages free
    [ "$(id -u)" = 0 ] && [ -w "$hp" ] || return 1
    hugepages_before=$(cat "$hp")
    trap "${hugepages_trap:+$hugepages_trap; }hugepages_restore" EXIT
    echo $((hugepages_before + add)) >"$hp" || true
    if ! grep -qs hugetlbfs /proc/mounts; then
        mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages || true
    fi
    free=$(awk '/^HugePages_Free/ {print $2}' /proc/meminfo)
    hugepages_free=${free:-0}
    [ "$hugepages_free" -ge "$need" ] && grep -qs hugetlbfs /proc/mounts
}
hugepages_restore() {
    echo "$hugepages_before" >/proc/sys/vm/nr_hugepages
}

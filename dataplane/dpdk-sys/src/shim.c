/*
 * The C side of cfdp's DPDK binding. DPDK's fast-path calls (rx/tx burst,
 * mbuf data pointer, bulk free) are static inline functions that no
 * library exports, so they are wrapped here; the slow-path set-up is
 * wrapped too, so that Rust declares only these functions with plain C
 * types and needs no bindgen. Every function is called per burst or at
 * set-up, never per packet.
 */
#include <stdint.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_eth_ring.h>
#include <rte_mempool.h>
#include <rte_ring.h>

int cfdp_eal_init(int argc, char **argv) { return rte_eal_init(argc, argv); }

int cfdp_eal_cleanup(void) { return rte_eal_cleanup(); }

int cfdp_errno(void) { return rte_errno; }

const char *cfdp_strerror(int e) { return rte_strerror(e); }

int cfdp_thread_register(void) { return rte_thread_register(); }

void cfdp_thread_unregister(void) { rte_thread_unregister(); }

uint16_t cfdp_port_count(void) { return rte_eth_dev_count_avail(); }

int cfdp_port_by_name(const char *name, uint16_t *port) {
    return rte_eth_dev_get_port_by_name(name, port);
}

int cfdp_port_name(uint16_t port, char *out, size_t len) {
    char name[RTE_ETH_NAME_MAX_LEN];
    int r = rte_eth_dev_get_name_by_port(port, name);
    if (r == 0) {
        strncpy(out, name, len - 1);
        out[len - 1] = 0;
    }
    return r;
}

void *cfdp_pool_create(const char *name, unsigned n, unsigned cache, uint16_t data_room) {
    return rte_pktmbuf_pool_create(name, n, cache, 0, data_room, (int)rte_socket_id());
}

void cfdp_pool_free(void *pool) { rte_mempool_free((struct rte_mempool *)pool); }

/* Configures and starts a port: rxq receive and txq transmit queues, RSS
 * over IP/TCP/UDP when rxq > 1 and the device offers it, and the receive
 * checksum offloads (IPv4, TCP, UDP) it offers. *rss_out tells whether RSS
 * was enabled, *csum_out whether the device checks TCP and UDP checksums
 * (each mbuf's RTE_MBUF_F_RX_L4_CKSUM_* flags then say its verdict). */
int cfdp_port_start(uint16_t port, uint16_t rxq, uint16_t txq, uint16_t nb_rxd, uint16_t nb_txd,
                    void *pool, int *rss_out, int *csum_out) {
    struct rte_eth_dev_info info;
    struct rte_eth_conf conf;
    int r = rte_eth_dev_info_get(port, &info);
    if (r != 0) return r;
    memset(&conf, 0, sizeof(conf));
    uint64_t want = RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP;
    uint64_t rss = info.flow_type_rss_offloads & want;
    *rss_out = 0;
    /* A Toeplitz key of repeated 0x6d5a hashes both directions of a flow
     * alike (symmetric RSS): both directions reach one worker, whose
     * fragment table and flow order they share. */
    static uint8_t sym_key[52];
    for (unsigned i = 0; i < sizeof(sym_key); i += 2) {
        sym_key[i] = 0x6d;
        sym_key[i + 1] = 0x5a;
    }
    if (rxq > 1 && rss != 0) {
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_hf = rss;
        if (info.hash_key_size > 0 && info.hash_key_size <= sizeof(sym_key)) {
            conf.rx_adv_conf.rss_conf.rss_key = sym_key;
            conf.rx_adv_conf.rss_conf.rss_key_len = info.hash_key_size;
        }
        *rss_out = 1;
    }
    uint64_t l4 = RTE_ETH_RX_OFFLOAD_TCP_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
    conf.rxmode.offloads = info.rx_offload_capa & (l4 | RTE_ETH_RX_OFFLOAD_IPV4_CKSUM);
    *csum_out = (conf.rxmode.offloads & l4) == l4;
    if (rxq > info.max_rx_queues || txq > info.max_tx_queues) return -EINVAL;
    r = rte_eth_dev_configure(port, rxq, txq, &conf);
    if (r != 0) return r;
    r = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rxd, &nb_txd);
    if (r != 0) return r;
    int socket = rte_eth_dev_socket_id(port);
    if (socket < 0) socket = (int)rte_socket_id();
    for (uint16_t q = 0; q < rxq; q++) {
        r = rte_eth_rx_queue_setup(port, q, nb_rxd, (unsigned)socket, NULL,
                                   (struct rte_mempool *)pool);
        if (r != 0) return r;
    }
    for (uint16_t q = 0; q < txq; q++) {
        r = rte_eth_tx_queue_setup(port, q, nb_txd, (unsigned)socket, NULL);
        if (r != 0) return r;
    }
    r = rte_eth_dev_start(port);
    if (r != 0) return r;
    rte_eth_promiscuous_enable(port); /* not every vdev supports it */
    return 0;
}

void cfdp_port_stop(uint16_t port) {
    rte_eth_dev_stop(port);
    rte_eth_dev_close(port);
}

struct cfdp_port_stats {
    uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
};

int cfdp_port_stats(uint16_t port, struct cfdp_port_stats *out) {
    struct rte_eth_stats s;
    int r = rte_eth_stats_get(port, &s);
    if (r != 0) return r;
    out->ipackets = s.ipackets;
    out->opackets = s.opackets;
    out->ibytes = s.ibytes;
    out->obytes = s.obytes;
    out->imissed = s.imissed;
    out->ierrors = s.ierrors;
    out->oerrors = s.oerrors;
    out->rx_nombuf = s.rx_nombuf;
    return 0;
}

uint16_t cfdp_rx_burst(uint16_t port, uint16_t q, void **mbufs, uint16_t n) {
    return rte_eth_rx_burst(port, q, (struct rte_mbuf **)mbufs, n);
}

uint16_t cfdp_tx_burst(uint16_t port, uint16_t q, void **mbufs, uint16_t n) {
    return rte_eth_tx_burst(port, q, (struct rte_mbuf **)mbufs, n);
}

void cfdp_free_bulk(void **mbufs, unsigned n) {
    rte_pktmbuf_free_bulk((struct rte_mbuf **)mbufs, n);
}

/* Data pointer and lengths of each mbuf of a burst (first segment; a
 * multi-segment packet is seen up to its first segment's end), and
 * whether the device vouched for its TCP or UDP data: its L4 checksum
 * flags GOOD, or NONE (the checksum field is not filled in, the data's
 * integrity checked: a virtual device's locally sent segment, Linux's
 * CHECKSUM_PARTIAL). BAD and UNKNOWN vouch for nothing. */
void cfdp_mbuf_views(void **mbufs, uint16_t n, const uint8_t **data, uint32_t *data_len,
                     uint32_t *pkt_len, uint8_t *l4_vouched) {
    for (uint16_t i = 0; i < n; i++) {
        struct rte_mbuf *m = (struct rte_mbuf *)mbufs[i];
        data[i] = rte_pktmbuf_mtod(m, const uint8_t *);
        data_len[i] = m->data_len;
        pkt_len[i] = m->pkt_len;
        uint64_t l4 = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
        l4_vouched[i] = l4 == RTE_MBUF_F_RX_L4_CKSUM_GOOD || l4 == RTE_MBUF_F_RX_L4_CKSUM_NONE;
    }
}

/* Copies n frames into fresh mbufs from pool, stored in out[0..]; returns
 * how many were made (it stops at the first that has no mbuf or does not
 * fit one segment). */
unsigned cfdp_mbufs_from(void *pool, const uint8_t *const *data, const uint32_t *len,
                         unsigned n, void **out) {
    unsigned done = 0;
    for (; done < n; done++) {
        struct rte_mbuf *m = rte_pktmbuf_alloc((struct rte_mempool *)pool);
        if (m == NULL) break;
        char *p = len[done] > UINT16_MAX ? NULL : rte_pktmbuf_append(m, (uint16_t)len[done]);
        if (p == NULL) {
            rte_pktmbuf_free(m);
            break;
        }
        memcpy(p, data[done], len[done]);
        out[done] = m;
    }
    return done;
}

/* --- net_ring: ports over rte_rings, for injecting and collecting packets
 * from the same process (tests). --- */

void *cfdp_ring_create(const char *name, unsigned count) {
    return rte_ring_create(name, count, (int)rte_socket_id(), RING_F_SP_ENQ | RING_F_SC_DEQ);
}

/* A port whose receive queue q takes packets from rx[q] and whose
 * transmit queue q puts them into tx[q]. */
int cfdp_ring_port(const char *name, void *const *rx, unsigned nrx, void *const *tx,
                   unsigned ntx) {
    return rte_eth_from_rings(name, (struct rte_ring *const *)rx, nrx,
                              (struct rte_ring *const *)tx, ntx, (unsigned)rte_socket_id());
}

/* Copies n frames into fresh mbufs and enqueues them; returns how many. */
unsigned cfdp_ring_inject(void *ring, void *pool, const uint8_t *const *data,
                          const uint32_t *len, unsigned n) {
    unsigned done = 0;
    for (; done < n; done++) {
        struct rte_mbuf *m = rte_pktmbuf_alloc((struct rte_mempool *)pool);
        if (m == NULL) break;
        char *p = rte_pktmbuf_append(m, (uint16_t)len[done]);
        if (p == NULL) {
            rte_pktmbuf_free(m);
            break;
        }
        memcpy(p, data[done], len[done]);
        if (rte_ring_enqueue((struct rte_ring *)ring, m) != 0) {
            rte_pktmbuf_free(m);
            break;
        }
    }
    return done;
}

/* Dequeues one frame: copies up to cap bytes into out, frees the mbuf,
 * returns its length, or -1 when the ring is empty. */
int cfdp_ring_collect(void *ring, uint8_t *out, uint32_t cap) {
    void *obj;
    if (rte_ring_dequeue((struct rte_ring *)ring, &obj) != 0) return -1;
    struct rte_mbuf *m = (struct rte_mbuf *)obj;
    uint32_t n = m->data_len < cap ? m->data_len : cap;
    memcpy(out, rte_pktmbuf_mtod(m, const uint8_t *), n);
    int len = (int)m->data_len;
    rte_pktmbuf_free(m);
    return len;
}

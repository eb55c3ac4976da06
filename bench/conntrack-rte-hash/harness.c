/*
 * DPDK's rte_hash on the connection keys cfdp's conntrack bench writes:
 * the peer of `cargo run --release -p cfdp-bench --bin conntrack --
 * --rte-hash HARNESS` (bench/conntrack-rte-hash.sh builds and runs both).
 *
 *   harness KEYFILE KEYLEN CAPACITY FILL BURST STRANGERS
 *
 * KEYFILE holds FILL + BURST + STRANGERS keys of KEYLEN bytes: the first
 * FILL are added untimed, the next BURST one at a time with a clock read
 * on each side (CLOCK_MONOTONIC, as Rust's Instant), then each of the
 * FILL keys, in a scattered order, is looked up one at a time and in bulk
 * (rte_hash_lookup_bulk, 32 at a time), and the STRANGERS (never added)
 * one at a time. rte_hash gets its
 * best configuration for the job: created for CAPACITY entries with the
 * lock-free read/write concurrency flag (RW_CONCURRENCY_LF, what a table
 * that workers read while another core writes needs), hashed with
 * rte_hash_crc (SSE4.2 CRC32, its fastest hash here).
 *
 * Prints one line: p50,p99,p999,max insert ns, failed inserts, single
 * lookup Mops, bulk lookup Mops, stranger lookup Mops, FILL keys found
 * singly, found in bulk, strangers found.
 *
 *   harness writers KEYFILE KEYLEN CAPACITY N THREADS
 *
 * Inserts the N keys of KEYFILE into an empty table from THREADS lcores
 * at once, each its own share, in rte_hash's multi-writer mode
 * (RTE_HASH_EXTRA_FLAGS_MULTI_WRITER_ADD with RW_CONCURRENCY_LF: its
 * writers may add from several cores; each lcore keeps a cache of free
 * slots). Prints `writers THREADS,Mops,failed`.
 * Written for cfdp; DPDK's own code is not copied.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_eal.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_launch.h>
#include <rte_lcore.h>

/* A prime: i * STRIDE % n visits 0..n once for any n it does not divide. */
#define STRIDE 1000003ull

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static uint64_t pct(const uint64_t *v, size_t n, double p)
{
	return v[(size_t)((double)(n - 1) * p + 0.5)];
}

/* `n` keys of `len` bytes from the file at `path`; NULL (said on stderr)
 * when they cannot be read. */
static uint8_t *read_keys(const char *path, size_t len, size_t n)
{
	uint8_t *keys = malloc(n * len);
	FILE *f = fopen(path, "rb");
	if (!keys || !f || fread(keys, len, n, f) != n) {
		fprintf(stderr, "cannot read %zu keys of %zu bytes from %s\n", n, len, path);
		free(keys);
		if (f)
			fclose(f);
		return NULL;
	}
	fclose(f);
	return keys;
}

/* One writer lcore's share of the keys. */
struct share {
	struct rte_hash *h;
	const uint8_t *keys;
	size_t len, from, to, failed;
};

static int add_share(void *arg)
{
	struct share *s = arg;
	for (size_t i = s->from; i < s->to; i++)
		s->failed += rte_hash_add_key(s->h, s->keys + i * s->len) < 0;
	return 0;
}

/* `harness writers KEYFILE KEYLEN CAPACITY N THREADS` (see the top). */
static int writers(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s writers KEYFILE KEYLEN CAPACITY N THREADS\n", argv[0]);
		return 2;
	}
	size_t len = strtoul(argv[3], NULL, 10), cap = strtoul(argv[4], NULL, 10);
	size_t n = strtoul(argv[5], NULL, 10), threads = strtoul(argv[6], NULL, 10);
	if (threads < 1 || threads > rte_lcore_count()) {
		fprintf(stderr, "%zu threads: the EAL has %u lcores\n", threads, rte_lcore_count());
		return 2;
	}
	uint8_t *keys = read_keys(argv[2], len, n);
	if (!keys)
		return 1;
	struct rte_hash_parameters p = {
		.name = "writers",
		.entries = (uint32_t)cap,
		.key_len = (uint32_t)len,
		.hash_func = rte_hash_crc,
		.hash_func_init_val = 0,
		.socket_id = 0,
		.extra_flag = RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF |
			      RTE_HASH_EXTRA_FLAGS_MULTI_WRITER_ADD,
	};
	struct rte_hash *h = rte_hash_create(&p);
	if (!h) {
		fprintf(stderr, "rte_hash_create failed\n");
		return 1;
	}
	struct share shares[RTE_MAX_LCORE];
	size_t per = n / threads;
	unsigned lcore = rte_get_main_lcore();
	unsigned lcores[RTE_MAX_LCORE];
	for (size_t t = 0; t < threads; t++) {
		shares[t] = (struct share){ h, keys, len, t * per, (t + 1) * per, 0 };
		lcores[t] = lcore;
		lcore = rte_get_next_lcore(lcore, 1, 0);
	}
	uint64_t s = now_ns();
	for (size_t t = 1; t < threads; t++)
		rte_eal_remote_launch(add_share, &shares[t], lcores[t]);
	add_share(&shares[0]);
	for (size_t t = 1; t < threads; t++)
		rte_eal_wait_lcore(lcores[t]);
	uint64_t took = now_ns() - s;
	size_t failed = 0;
	for (size_t t = 0; t < threads; t++)
		failed += shares[t].failed;
	printf("writers %zu,%.3f,%zu\n", threads, (double)(per * threads) / (double)took * 1e3,
	       failed);
	rte_hash_free(h);
	return 0;
}

int main(int argc, char **argv)
{
	/* rte_hash's memory from 2 MB huge pages, as DPDK runs in production,
	 * when the script reserved them (HARNESS_HUGEPAGES=1); else from
	 * ordinary 4 KB pages (--no-huge). */
	const char *hp = getenv("HARNESS_HUGEPAGES");
	int huge = hp != NULL && strcmp(hp, "1") == 0;
	/* The writers mode runs an lcore a thread it is asked for. */
	int multi = argc > 1 && strcmp(argv[1], "writers") == 0;
	char lcores[32];
	snprintf(lcores, sizeof lcores, "0-%lu",
		 multi && argc == 7 ? strtoul(argv[6], NULL, 10) - 1 : 0ul);
	char *eal_huge[] = { argv[0], "--no-pci", "-l", lcores, "--log-level=lib.eal:error",
			     "--no-telemetry", NULL };
	char *eal_small[] = { argv[0], "--no-huge", "-m", "2048", "--no-pci", "-l", lcores,
			      "--log-level=lib.eal:error", "--no-telemetry", NULL };
	if (huge ? rte_eal_init(6, eal_huge) < 0 : rte_eal_init(9, eal_small) < 0) {
		fprintf(stderr, "rte_eal_init failed\n");
		return 1;
	}
	printf("pages %s\n", huge ? "2M" : "4K");
	if (multi) {
		int r = writers(argc, argv);
		rte_eal_cleanup();
		return r;
	}
	if (argc != 7) {
		fprintf(stderr, "usage: %s KEYFILE KEYLEN CAPACITY FILL BURST STRANGERS\n", argv[0]);
		return 2;
	}
	size_t len = strtoul(argv[2], NULL, 10), cap = strtoul(argv[3], NULL, 10);
	size_t fill = strtoul(argv[4], NULL, 10), burst = strtoul(argv[5], NULL, 10);
	size_t strangers = strtoul(argv[6], NULL, 10), total = fill + burst + strangers;
	uint8_t *keys = read_keys(argv[1], len, total);
	if (!keys)
		return 1;
	struct rte_hash_parameters p = {
		.name = "conntrack",
		.entries = (uint32_t)cap,
		.key_len = (uint32_t)len,
		.hash_func = rte_hash_crc,
		.hash_func_init_val = 0,
		.socket_id = 0,
		.extra_flag = RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF,
	};
	struct rte_hash *h = rte_hash_create(&p);
	if (!h) {
		fprintf(stderr, "rte_hash_create failed\n");
		return 1;
	}
	size_t failed = 0;
	for (size_t i = 0; i < fill; i++)
		failed += rte_hash_add_key(h, keys + i * len) < 0;
	uint64_t *ns = malloc(burst * sizeof *ns);
	for (size_t i = 0; i < burst; i++) {
		const uint8_t *k = keys + (fill + i) * len;
		uint64_t s = now_ns();
		int r = rte_hash_add_key(h, k);
		ns[i] = now_ns() - s;
		failed += r < 0;
	}
	qsort(ns, burst, sizeof *ns, cmp_u64);
	/* Looked up in a scattered order (the same stride as the Rust side):
	 * traffic does not arrive in the order connections opened. */
	size_t found = 0;
	uint64_t s = now_ns();
	for (size_t i = 0; i < fill; i++)
		found += rte_hash_lookup(h, keys + (i * STRIDE % fill) * len) >= 0;
	double single = (double)fill / (double)(now_ns() - s) * 1e3;
	const void *batch[32];
	int32_t pos[32];
	size_t bulk_found = 0;
	s = now_ns();
	for (size_t i = 0; i + 32 <= fill; i += 32) {
		for (int j = 0; j < 32; j++)
			batch[j] = keys + ((i + j) * STRIDE % fill) * len;
		rte_hash_lookup_bulk(h, batch, 32, pos);
		for (int j = 0; j < 32; j++)
			bulk_found += pos[j] >= 0;
	}
	double bulk = (double)(fill / 32 * 32) / (double)(now_ns() - s) * 1e3;
	size_t strays = 0;
	s = now_ns();
	for (size_t i = fill + burst; i < total; i++)
		strays += rte_hash_lookup(h, keys + i * len) >= 0;
	double miss = (double)strangers / (double)(now_ns() - s) * 1e3;
	printf("%lu,%lu,%lu,%lu,%zu,%.3f,%.3f,%.3f,%zu,%zu,%zu\n", pct(ns, burst, 0.5),
	       pct(ns, burst, 0.99), pct(ns, burst, 0.999), ns[burst - 1], failed, single, bulk,
	       miss, found, bulk_found, strays);
	rte_hash_free(h);
	rte_eal_cleanup();
	return 0;
}

/*
 * iscsi-rwperf: a small time-bounded load generator over libiscsi that can
 * WRITE as well as read.
 *
 * Why it exists: libiscsi 1.19's iscsi-perf only issues READ(16), Debian 12's
 * fio is built without its libiscsi engine, and the host kernel has no iSCSI
 * initiator, so there is no stock userspace tool that writes over iSCSI here.
 * bench/bs-compare.sh builds this file into its per-run scratch folder and
 * uses it for the write workloads (reads still use iscsi-perf so the numbers
 * stay comparable with the baselines in ENVIRONMENT.md).
 *
 * The access pattern mirrors iscsi-perf's default: sequential, fixed-size
 * requests, a fixed number in flight, wrapping at the end of the LUN, one
 * session, one TCP connection, a single-threaded poll() loop.
 *
 *   iscsi-rwperf [-w] [-i IQN] [-m IN_FLIGHT] [-s BYTES_PER_IO] [-t SECONDS] URL
 *
 * Last line of output (machine-readable, parsed by bs-compare.sh):
 *   RESULT op=write ios=N seconds=S iops=X bytes_per_io=B blocksize=L
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

struct run {
    struct iscsi_context *iscsi;
    int lun;
    int write;
    uint32_t blocksize;
    uint64_t nblocks;   /* capacity of the LUN in blocks */
    uint32_t io_blocks; /* blocks per request */
    uint64_t next_lba;
    int in_flight;
    int max_in_flight;
    int stopping; /* deadline passed: submit nothing more */
    int failed;
    uint64_t done;      /* completed requests */
    unsigned char *buf; /* one shared buffer: written from, read into */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void submit(struct run *r);

static void on_done(struct iscsi_context *iscsi, int status, void *command_data, void *private_data) {
    struct run *r = private_data;
    struct scsi_task *task = command_data;

    r->in_flight--;
    if (status != SCSI_STATUS_GOOD) {
        fprintf(stderr, "iscsi-rwperf: %s failed: status %d, %s\n", r->write ? "WRITE(16)" : "READ(16)",
                status, iscsi_get_error(iscsi));
        r->failed = 1;
        r->stopping = 1;
    } else {
        r->done++;
    }
    if (task) scsi_free_scsi_task(task);
    submit(r);
}

/* Keep max_in_flight requests outstanding until the deadline. */
static void submit(struct run *r) {
    while (!r->stopping && r->in_flight < r->max_in_flight) {
        struct scsi_task *t;
        uint32_t len = r->io_blocks * r->blocksize;

        if (r->next_lba + r->io_blocks > r->nblocks) r->next_lba = 0;
        if (r->write)
            t = iscsi_write16_task(r->iscsi, r->lun, r->next_lba, r->buf, len, (int)r->blocksize, 0, 0, 0, 0,
                                   0, on_done, r);
        else /* Reads land in libiscsi's own buffers, as with iscsi-perf. */
            t = iscsi_read16_task(r->iscsi, r->lun, r->next_lba, len, (int)r->blocksize, 0, 0, 0, 0, 0,
                                  on_done, r);
        if (!t) {
            fprintf(stderr, "iscsi-rwperf: cannot queue request: %s\n", iscsi_get_error(r->iscsi));
            r->failed = 1;
            r->stopping = 1;
            return;
        }
        r->in_flight++;
        r->next_lba += r->io_blocks;
    }
}

static void usage(void) {
    fprintf(stderr,
            "usage: iscsi-rwperf [-w] [-i IQN] [-m IN_FLIGHT] "
            "[-s BYTES_PER_IO] [-t SECONDS] iscsi://HOST:PORT/IQN/LUN\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *initiator = "iqn.2026-01.bench.local:iscsi-rwperf";
    struct run r;
    uint32_t io_bytes = 4096;
    double seconds = 10;
    int c;

    memset(&r, 0, sizeof(r));
    r.max_in_flight = 32;
    while ((c = getopt(argc, argv, "wi:m:s:t:")) != -1) {
        switch (c) {
            case 'w': r.write = 1; break;
            case 'i': initiator = optarg; break;
            case 'm': r.max_in_flight = atoi(optarg); break;
            case 's': io_bytes = (uint32_t)strtoul(optarg, NULL, 0); break;
            case 't': seconds = atof(optarg); break;
            default: usage();
        }
    }
    if (optind != argc - 1 || r.max_in_flight < 1 || io_bytes == 0 || seconds <= 0) usage();

    r.iscsi = iscsi_create_context(initiator);
    if (!r.iscsi) {
        fprintf(stderr, "iscsi-rwperf: cannot create context\n");
        return 1;
    }
    struct iscsi_url *url = iscsi_parse_full_url(r.iscsi, argv[optind]);
    if (!url) {
        fprintf(stderr, "iscsi-rwperf: bad URL: %s\n", iscsi_get_error(r.iscsi));
        return 1;
    }
    iscsi_set_targetname(r.iscsi, url->target);
    iscsi_set_session_type(r.iscsi, ISCSI_SESSION_NORMAL);
    /* No digests: same as what tgt ends up using with iscsi-perf. */
    iscsi_set_header_digest(r.iscsi, ISCSI_HEADER_DIGEST_NONE);
    if (iscsi_full_connect_sync(r.iscsi, url->portal, url->lun) != 0) {
        fprintf(stderr, "iscsi-rwperf: login failed: %s\n", iscsi_get_error(r.iscsi));
        return 1;
    }
    r.lun = url->lun;
    iscsi_destroy_url(url);

    struct scsi_task *task = iscsi_readcapacity16_sync(r.iscsi, r.lun);
    if (!task || task->status != SCSI_STATUS_GOOD) {
        fprintf(stderr, "iscsi-rwperf: READ CAPACITY(16) failed: %s\n", iscsi_get_error(r.iscsi));
        return 1;
    }
    struct scsi_readcapacity16 *cap = scsi_datain_unmarshall(task);
    if (!cap || cap->block_length == 0) {
        fprintf(stderr, "iscsi-rwperf: cannot parse READ CAPACITY(16) data\n");
        return 1;
    }
    r.blocksize = cap->block_length;
    r.nblocks = cap->returned_lba + 1;
    scsi_free_scsi_task(task);

    if (io_bytes % r.blocksize) {
        fprintf(stderr, "iscsi-rwperf: %u bytes is not a multiple of the %u-byte block\n", io_bytes,
                r.blocksize);
        return 1;
    }
    r.io_blocks = io_bytes / r.blocksize;
    if (r.io_blocks > r.nblocks) {
        fprintf(stderr, "iscsi-rwperf: request larger than the LUN\n");
        return 1;
    }
    r.buf = malloc(io_bytes);
    if (!r.buf) {
        fprintf(stderr, "iscsi-rwperf: out of memory\n");
        return 1;
    }
    /* Non-zero, non-uniform payload so nothing can shortcut zero writes. */
    for (uint32_t i = 0; i < io_bytes; i++) r.buf[i] = (unsigned char)(i * 131u + 7u);

    double start = now_s(), deadline = start + seconds;
    submit(&r);
    while (r.in_flight > 0) {
        struct pollfd pfd = {.fd = iscsi_get_fd(r.iscsi), .events = (short)iscsi_which_events(r.iscsi)};
        /* A timeout so the deadline is noticed even if the target stalls. */
        int n = poll(&pfd, 1, 100);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("iscsi-rwperf: poll");
            return 1;
        }
        if (iscsi_service(r.iscsi, n > 0 ? pfd.revents : 0) < 0) {
            fprintf(stderr, "iscsi-rwperf: connection failed: %s\n", iscsi_get_error(r.iscsi));
            return 1;
        }
        if (!r.stopping && now_s() >= deadline) r.stopping = 1; /* then drain what is in flight */
    }
    double elapsed = now_s() - start;

    iscsi_logout_sync(r.iscsi);
    iscsi_destroy_context(r.iscsi);
    free(r.buf);
    if (r.failed) return 1;
    printf("RESULT op=%s ios=%" PRIu64 " seconds=%.3f iops=%.0f bytes_per_io=%u blocksize=%u\n",
           r.write ? "write" : "read", r.done, elapsed, (double)r.done / elapsed, io_bytes, r.blocksize);
    return 0;
}

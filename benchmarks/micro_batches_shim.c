/* Preloaded in front of libllama by benchmarks/micro_batches.py: records each llama_process call of
 * llama-server (time, and each sequence's tokens and first position in batch order) to $DECODE_TRACE.
 * The batch's rows are learnt from the calls that fill it (llama_batch_ext_add_token, _set_pos),
 * since llama_batch_ext is opaque. One line a call: "<start s> <seconds> seq:tokens:pos,..." */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_TOKENS 65536
#define MAX_SEQS 256

static void *batch_seen;
static int n_tokens;
static int32_t token_seq[MAX_TOKENS];
static int32_t token_pos[MAX_TOKENS];
static FILE *trace;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void llama_batch_ext_clear(void *batch) {
    static void (*real)(void *);
    if (!real) real = (void (*)(void *))dlsym(RTLD_NEXT, "llama_batch_ext_clear");
    if (batch == batch_seen) n_tokens = 0;
    real(batch);
}

int32_t llama_batch_ext_add_token(void *batch, int32_t seq_id, int32_t token) {
    static int32_t (*real)(void *, int32_t, int32_t);
    if (!real) real = (int32_t (*)(void *, int32_t, int32_t))dlsym(RTLD_NEXT, "llama_batch_ext_add_token");
    int32_t index = real(batch, seq_id, token);
    if (batch != batch_seen) {
        batch_seen = batch;
        n_tokens = 0;
    }
    if (index >= 0 && index < MAX_TOKENS) {
        token_seq[index] = seq_id;
        token_pos[index] = -1;
        if (index + 1 > n_tokens) n_tokens = index + 1;
    }
    return index;
}

bool llama_batch_ext_set_pos(void *batch, int32_t index, const int32_t *pos) {
    static bool (*real)(void *, int32_t, const int32_t *);
    if (!real) real = (bool (*)(void *, int32_t, const int32_t *))dlsym(RTLD_NEXT, "llama_batch_ext_set_pos");
    if (batch == batch_seen && index >= 0 && index < MAX_TOKENS && pos) token_pos[index] = pos[0];
    return real(batch, index, pos);
}

int32_t llama_process(void *ctx, int type, void *batch) {
    static int32_t (*real)(void *, int, void *);
    if (!real) real = (int32_t (*)(void *, int, void *))dlsym(RTLD_NEXT, "llama_process");
    if (!trace) {
        const char *path = getenv("DECODE_TRACE");
        trace = fopen(path ? path : "/dev/null", "a");
        setvbuf(trace, NULL, _IOLBF, 0);
    }
    double started = now();
    int32_t code = real(ctx, type, batch);
    double seconds = now() - started;
    int32_t seqs[MAX_SEQS], counts[MAX_SEQS], first_pos[MAX_SEQS], n_seqs = 0;
    for (int i = 0; batch == batch_seen && i < n_tokens; i++) {
        int j = 0;
        while (j < n_seqs && seqs[j] != token_seq[i]) j++;
        if (j == n_seqs) {
            if (n_seqs == MAX_SEQS) continue;
            seqs[j] = token_seq[i];
            counts[j] = 0;
            first_pos[j] = token_pos[i];
            n_seqs++;
        }
        counts[j]++;
    }
    if (n_seqs == 0) return code;
    fprintf(trace, "%.4f %.5f ", started, seconds);
    for (int j = 0; j < n_seqs; j++) fprintf(trace, "%s%d:%d:%d", j ? "," : "", seqs[j], counts[j], first_pos[j]);
    fprintf(trace, "\n");
    return code;
}

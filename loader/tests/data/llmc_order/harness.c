/* Test-data harness for guideloom issue 14 (not part of the build): drives llm.c's own
 * `DataLoader` (llmc/dataloader.h of karpathy/llm.c, included from a checkout given at
 * compile time; no llm.c code is copied here) and prints, after every `dataloader_next_batch`,
 * the loader's position (current_shard_idx, current_sample_idx: what train_gpt2.cu's
 * `save_state` stores) and the batch's B*T+1 tokens (inputs, then the last target).
 *
 * usage: harness PATTERN B T RANK PROCESSES SHUFFLE BATCHES [STATE_AFTER STATE_FILE]
 * With STATE_AFTER, after that many batches it also writes STATE_FILE in the layout of
 * train_gpt2.cu's `save_state` (header of 256 int32, then 3 made-up optimizer floats
 * standing in for m and v, then the shuffle tail when shuffling). */
#include "llmc/dataloader.h"

int main(int argc, char **argv) {
    if (argc != 8 && argc != 10) { fprintf(stderr, "bad usage\n"); return 2; }
    size_t B = (size_t) atol(argv[2]), T = (size_t) atol(argv[3]);
    int rank = atoi(argv[4]), procs = atoi(argv[5]), shuffle = atoi(argv[6]);
    long batches = atol(argv[7]);
    long state_after = argc == 10 ? atol(argv[8]) : -1;
    DataLoader loader;
    dataloader_init(&loader, argv[1], B, T, rank, procs, shuffle);
    printf("case %zu %zu %d %d %d\n", B, T, rank, procs, shuffle);
    for (long i = 0; i < batches; i++) {
        dataloader_next_batch(&loader);
        printf("%zu %zu", loader.current_shard_idx, loader.current_sample_idx);
        for (size_t t = 0; t < B * T; t++) printf(" %d", loader.inputs[t]);
        printf(" %d\n", loader.targets[B * T - 1]);
        if (i + 1 == state_after) {
            FILE *f = fopen(argv[9], "wb");
            int header[256];
            memset(header, 0, sizeof(header));
            header[0] = 20240527;
            header[1] = 1;
            header[2] = procs;
            header[3] = rank;
            header[5] = shuffle;
            header[10] = (int) (i + 1);
            *((size_t *) &header[30]) = loader.current_shard_idx;
            *((size_t *) &header[32]) = loader.current_sample_idx;
            fwrite(header, sizeof(int), 256, f);
            float opt[3] = {0.5f, 0.25f, 0.125f};
            fwrite(opt, sizeof(float), 3, f);
            if (shuffle) {
                fwrite(&loader.glob_result.gl_pathc, sizeof(size_t), 1, f);
                fwrite(loader.shard_indices, sizeof(int), loader.glob_result.gl_pathc, f);
                fwrite(&loader.shard_num_samples, sizeof(size_t), 1, f);
                fwrite(loader.intra_shard_indices, sizeof(int), loader.shard_num_samples, f);
                loader.shuffle_rng.seed_ = 0; /* llm.c leaves it unset; zero it for a stable file */
                fwrite(&loader.shuffle_rng, sizeof(mt19937_state), 1, f);
            }
            fclose(f);
        }
    }
    dataloader_free(&loader);
    return 0;
}

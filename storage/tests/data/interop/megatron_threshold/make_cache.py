"""Regenerates this folder: a Megatron dataset of 101 tokens in 14 documents (25 samples of
4 tokens per epoch) written by megatron-core's own IndexedDatasetBuilder, megatron-core's
GPTDataset index caches for 42 to 46 samples (the final epoch 17 to 21 of 25 samples: 0.68,
0.72, 0.76, 0.80 and 0.84 of an epoch, around the separate-last-epoch threshold 0.80), and
expected.json with what megatron-core computes for blend sizes (surplus) and split bookends.

Needs megatron-core 0.16.1, torch (CPU is enough) and numpy in the running Python:

    python3 -m venv /tmp/mcore && /tmp/mcore/bin/pip install 'megatron-core==0.16.1' torch numpy
    /tmp/mcore/bin/python storage/tests/data/interop/megatron_threshold/make_cache.py

The cache files' names embed the MD5 of megatron-core's description of the dataset, which
holds the absolute path of the prefix; description.txt has it replaced by `<samples>` (so the
names are those of the run that made the committed files, whatever the path).
"""

import json
import math
import os
import shutil
import tempfile

import numpy as np
import torch
from megatron.core.datasets.blended_megatron_dataset_builder import (
    BlendedMegatronDatasetBuilder,
    _get_size_per_split_per_dataset,
)
from megatron.core.datasets.blended_megatron_dataset_config import (
    convert_split_vector_to_split_matrix,
    parse_and_normalize_split,
)
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "threshold_text_document"
LENGTHS = [7, 5, 9, 3, 8, 6, 11, 4, 10, 7, 5, 9, 8, 9]  # 101 tokens, the last of each is 50256
SAMPLES = [42, 43, 44, 45, 46]


def documents():
    return [[1000 + 20 * d + t for t in range(n - 1)] + [50256] for d, n in enumerate(LENGTHS)]


def main():
    assert sum(LENGTHS) == 101
    work = tempfile.mkdtemp()
    prefix = os.path.join(work, NAME)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for doc in documents():
        builder.add_item(torch.tensor(doc, dtype=torch.int64))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    for ext in (".bin", ".idx"):
        shutil.copy(prefix + ext, os.path.join(HERE, NAME + ext))
    cache = os.path.join(HERE, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    built = {}
    for n in SAMPLES:
        config = GPTDatasetConfig(
            random_seed=1234,
            sequence_length=4,
            blend=([prefix], None),
            split="1,0,0",
            path_to_cache=cache,
            tokenizer=NullTokenizer(50256),
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
        )
        train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [n, 0, 0], lambda: True, config).build()
        built[str(n)] = {
            "md5": train.unique_description_hash,
            "len": len(train),
            "samples": [train[i]["tokens"].tolist() + [int(train[i]["labels"][-1])] for i in range(len(train))],
        }
    for f in os.listdir(cache):
        if f.endswith("-description.txt"):
            path = os.path.join(cache, f)
            with open(path) as fh:
                text = fh.read()
            with open(path, "w") as fh:
                fh.write(text.replace(work, "<samples>/megatron_threshold"))
    # Megatron's blend sizes: ceil(ceil(n * w) * (1 + surplus)) per component.
    blends = []
    for weights, n, surplus in [
        ([0.5, 0.5], 400, 0.005),
        ([0.5, 0.5], 398, 0.005),
        ([0.5, 0.5], 402, 0.005),
        ([0.25, 0.75], 10, 0.005),
        ([0.25, 0.75], 8, 0.005),
        ([0.25, 0.75], 12, 0.0),
        ([0.3, 0.7], 1000, 0.005),
        ([0.2, 0.3, 0.5], 200, 0.005),
        ([0.2, 0.3, 0.5], 199, 0.005),
        ([0.5, 0.5], 1, 0.0),
    ]:
        total = sum(weights)
        norm = [w / total for w in weights]
        sizes = [s[0] for s in _get_size_per_split_per_dataset(norm, [n], surplus)]
        blends.append({"weights": weights, "samples": n, "surplus": surplus, "sizes": sizes})
    # Split bookends: round(fraction * documents), Python's round (half to even).
    splits = []
    for split, docs in [("1,1", 5), ("1,1", 6), ("1,1", 7), ("1,3", 2), ("1,3", 6), ("1,3", 10), ("3,1", 6),
                        ("1,1,2", 4), ("1,1,2", 2), ("2,1,1", 10), ("969,30,1", 500), ("969,30,1", 1500)]:
        matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
        ranges = [None if m is None else [int(round(m[0] * float(docs))), int(round(m[1] * float(docs)))] for m in matrix]
        splits.append({"split": split, "documents": docs, "ranges": ranges})
    with open(os.path.join(HERE, "expected.json"), "w") as fh:
        json.dump({"lengths": LENGTHS, "gpt": built, "blends": blends, "splits": splits}, fh, indent=1)
        fh.write("\n")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()

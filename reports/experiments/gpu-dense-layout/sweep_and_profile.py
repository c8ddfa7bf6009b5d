"""Dense layout on the GPU, eager kernels: group-size sweep for 64 queries x 500 docs, then a profile of one query.

Run on a CUDA machine from the repository root: python3 reports/experiments/gpu-dense-layout/sweep_and_profile.py
"""

import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.score import random_embeddings, random_model, realistic_batch
from worker.scorer import DeltaScorer

model = random_model(random_embeddings(33000), gain=3.0)
scorer = DeltaScorer(model, torch.device("cuda"), layout="dense", cuda_graphs=False)
batches = [realistic_batch(33000, seed=i) for i in range(64)]
requests = [(b.query_rows, b.doc_rows, b.lex) for b in batches]
for group in (1024, 2048, 4096, 8192, 16384):
    scorer.group_docs = group
    for _ in range(3):
        scorer.score_many(requests)
    times = []
    for _ in range(15):
        t = time.perf_counter()
        scorer.score_many(requests)
        times.append(time.perf_counter() - t)
    print(
        f"group {group:>6}: 64 queries p50 {np.median(times) * 1e3:.1f} ms, "
        f"{np.median(times) * 1e3 / 64:.2f} ms/query, peak mem {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
    )
scorer.group_docs = 4096
b = batches[0]
for _ in range(20):
    scorer.score(b.query_rows, b.doc_rows, b.lex)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(50):
        scorer.score(b.query_rows, b.doc_rows, b.lex)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))

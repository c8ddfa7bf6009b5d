"""Fast inference for a trained ``DeltaModel`` (the serving path of the worker).

``DeltaScorer`` gives the scores of ``DeltaModel.forward`` in eval mode (tested
to 1e-4 absolute on every variant; observed 1e-6 on scores of spread ~0.5) with
the same arithmetic reorganised so that almost nothing is computed per (document,
position) that could be computed per word or per vocabulary entry.

Algorithm (one query: rows q_1..q_M; n documents of N tokens; F filters, k taps):

1. Tables, once per model. The first conv layer is linear in the Delta
   vector, so for the V difference channels W_t . (d - q*) = P[d, t] - P[q*, t]
   with P = E @ W  [n_words, k * F] (77 MB for 200k words, accumulated in
   float64), plus |e|^2 and |e| per word.
2. Delta stage per *distinct* document word (500 x 50 positions hold 7-10k
   distinct words; found with an O(n) scatter/read-back, ``distinct_ids``): one
   gather of their vectors, d . q_j by one [U, V] x [V, M] matmul, squared
   distances |d|^2 - 2 d.q + |q|^2 (the expansion torch.cdist uses) -> closest
   query word, cosine, distance, proximity. Where the expansion cancels
   (|d - q*|^2 < 0.1 (|d|^2 + |q*|^2), i.e. exact matches and near-duplicate
   vectors) the distance is recomputed from the vectors, so a match gives
   exactly 0 as in the reference (without that the error reaches 8e-3).
   Conv-1 contribution of each word: Z = P[d] + [cos, dist, prox, onehot(q*)] @
   [feature taps; bias - P[q_j]]  (one gather + one [U, 3 + M] matmul; the one-hot
   rows sum to 1 and carry the bias).
3. Layout: all documents end to end with ``gap`` (= 1 for k = 3) masked rows
   between them, so 'same' convolution over the whole batch is one long 1-D
   convolution. Conv layer 1 = one ``embedding_bag`` (sum of Z[word at r - 1,
   tap 0], Z[word at r, tap 1], Z[word at r + 1, tap 2]). Conv layers 2..N_C =
   k accumulated matmuls [L, F] x [F, F] on shifted contiguous slices (no
   unfold copy). LeakyReLU in place, masking by ``index_fill_`` on the ~5%
   padded rows, masked max-pool as a view [n, N + gap, F], dense layers.

``score_many`` runs step 2 per request and step 3 once for all requests (on
the CPU once per group of <= 512 documents, which is faster there).

That "sparse" layout is the CPU's. On a GPU it is launch-bound: the
per-request loop, the host-side de-duplication and the data-dependent
recomputation (a device->host sync each) left an H100 idle ~90% of the time,
slower than the plain reference forward. The GPU's "dense" layout
(``_forward_dense``) pads every request of a group to one [n_max, N] block and
computes the Delta stage per position (exact distances for all, as in the
reference): ~80 kernels per group whatever the number of requests, one
device->host copy, replayed as a CUDA graph per padded shape (``GraphCache``).
Conv 1 still comes from the table P. Only int ids and the Lex features travel
host->device. Float32 throughout: half precision would not
hold the 1e-4 agreement. Both layouts run on either device (the tests check
the dense one on the CPU).

Thread safety: concurrent calls are safe. Nothing is mutated after construction
but the CUDA graph cache, under its lock (torch intra-op threads are the
process's, see ``torch.set_num_threads``).

What each step bought (2-core Xeon AVX-512, torch 2.13 CPU, 500 realistic
documents, 33k words, p50 measured in one process on a quiet machine unless
marked "micro" = the step alone, 1 thread, on a shared machine):

- reference ``DeltaModel.forward``: 103 ms (2 threads) / 183 ms (1 thread);
  this scorer: 5.3 ms / 8.6 ms (x19 / x21). 2 threads vs 1: x1.6.
- Delta stage per distinct word instead of per position: 10.7 -> 5.3 ms
  (2 threads), 20.4 -> 8.6 ms (1 thread).
- conv-1 from the table P instead of a [U, 303] x [303, 96] matmul on the
  distinct words: 4.5 -> 0.26 ms for that step (micro).
- exact |d - q*| only where the expansion cancels, not for every row:
  36.7 -> 10.7 ms in the per-position layout (2 threads).
- ``index_select`` instead of advanced indexing ``t[idx]``: 4.4 -> 0.9 ms per
  [25k, 96] gather (micro; PyTorch's CPU advanced indexing is 5x slower).
- ``embedding_bag`` for conv 1 instead of gather [L, 3F] + shift-add: 1.65 ->
  0.69 ms (micro); k accumulated matmuls for conv 2..3 on shifted slices:
  1.61 ms vs 1.73 (F.conv1d, oneDNN) and 1.72 (unfold copy + one matmul).
- one-hot folding of -P[q*] and the bias into the feature matmul: 11.7 ->
  9.6 ms end to end (CPU time, shared machine).
- O(n) ``distinct_ids`` instead of np.unique: x1.09 end to end (0.2 vs 1.0 ms).
- CPU ``score_many`` in groups of <= 512 documents: 4 x 500 documents cost
  9.3 ms per query (1 thread) instead of 11.0 ms in one pass.
- tried and dropped: gathering + dotting the document vectors in cache-sized
  chunks (+-3%, noise), numpy (huge-page) allocation of the tables (no gain),
  conv stage in chunks of 64-256 documents for one query (slower).

Threads: 2 torch threads are 1.6x faster than 1 on an idle 2-core machine,
but with the default OpenMP wait policy and ANY other busy process they
collapse (p50 220 ms instead of 8.6 ms: ~60 small parallel regions per call,
each waiting for a descheduled thread). ``OMP_WAIT_POLICY=PASSIVE`` (set
before torch is imported) avoids the collapse but costs the 2-thread gain on
an idle machine (8.3 ms). So: 2 threads on a dedicated worker machine,
``torch.set_num_threads(1)`` where the worker shares its cores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.nn import functional as F

from worker.cuda_graphs import GraphCache
from worker.model import COS_EPS, PAD_ID, PROX_EPS, DeltaModel
from worker.score_layouts import DenseBatch, Request, SparsePlan, request_groups

# |d - q*|^2 below this fraction of |d|^2 + |q*|^2 is recomputed from the vectors (cancellation)
NEAR_FRACTION = 0.1
# score_many on the CPU: requests are grouped up to this many documents per forward pass.
# 4 x 500 documents in one pass cost 11.0 ms per query, one pass per request 8.7 ms
# (conv activations of 25k rows x 32 floats stay in L2; 100k rows do not).
CPU_GROUP_DOCS = 512
# The dense layout (GPU) holds ~5 KB per document position in flight (two [V] float
# vectors and their difference, the [3F] taps): 4096 documents of 50 words are ~1 GB.
DENSE_GROUP_DOCS = 4096
# CUDA graphs of the dense forward kept per padded shape (each holds its activations,
# <= ~1 GB for a full group); requests are padded to few shapes (see DenseBatch.build).
GRAPH_CACHE_SIZE = 8
LAYOUTS = ("sparse", "dense")


def default_device() -> torch.device:
    """CUDA when this machine has a device, else CPU (counted as in ``resolve_device``, before a fork too)."""
    return torch.device("cuda" if torch.cuda.device_count() > 0 else "cpu")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a torch device (None: ``default_device``); ``ValueError`` for a CUDA device this
    machine does not have.

    ``torch.cuda.device_count`` asks NVML where it can, without initialising CUDA, so
    a prefork parent can check before it forks its children.
    """
    if device is None:
        return default_device()
    device = torch.device(device)
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise ValueError(f"device {device} requested but CUDA is not available; use device='cpu'")
        if (device.index or 0) >= count:
            raise ValueError(
                f"device {device} requested but this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    return device


class DeltaScorer:
    """Fast inference for a trained DeltaModel; same scores as DeltaModel.forward (eval mode)."""

    def __init__(
        self, model: DeltaModel, device: torch.device, layout: str | None = None, cuda_graphs: bool | None = None
    ) -> None:
        config = model.config
        if config.n_conv < 1:
            raise ValueError("DeltaScorer needs at least one convolution layer (config.n_conv >= 1)")
        layout = ("sparse" if device.type == "cpu" else "dense") if layout is None else layout
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: expected one of {LAYOUTS}")
        self.config = config
        self._device = device
        self.layout = layout
        # Documents per forward pass: cache-sized activations on the CPU, bounded memory on a GPU.
        self.group_docs = CPU_GROUP_DOCS if layout == "sparse" else DENSE_GROUP_DOCS
        if cuda_graphs is None:
            cuda_graphs = layout == "dense" and device.type == "cuda"
        if cuda_graphs and (layout != "dense" or device.type != "cuda"):
            raise ValueError("cuda_graphs needs the dense layout on a CUDA device")
        self._graphs = GraphCache(self._dense_scores, device, GRAPH_CACHE_SIZE) if cuda_graphs else None
        k, n_f, dim = config.kernel_width, config.n_filters, config.embedding_dim
        self.k, self.n_f = k, n_f
        self.left = (k - 1) // 2  # padding="same": output i reads inputs i - left .. i + k - 1 - left
        self.gap = max(self.left, k - 1 - self.left)  # zero rows between documents
        self.slope = config.leaky_slope
        self.n_lex = len(config.lex_names)

        def param(tensor: torch.Tensor | torch.nn.Module) -> torch.Tensor:
            """A weight as float32 on the device (a ModuleList's layers are Modules to the type checker)."""
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"expected a weight tensor, got a {type(tensor).__name__}")
            return tensor.detach().to(device=device, dtype=torch.float32)

        with torch.inference_mode():
            embeddings = param(model.embeddings).contiguous()
            self.embeddings = embeddings  # [W, V]; on CPU the model's own buffer (no copy)
            self.n_words = embeddings.shape[0]
            self.sq_norm = _row_sq_norms(embeddings)  # [W]
            self.norm = self.sq_norm.sqrt()  # [W]
            weight = param(model.convs[0].weight)  # [F, C, k]
            taps = weight.permute(1, 2, 0).reshape(weight.shape[1], k * n_f)  # [C, k*F], col t*F+f
            self.table = _word_table(embeddings, taps[:dim]) if config.use_difference else None  # [W, k*F]
            feature_taps = taps[dim:] if config.use_difference else taps  # [3, k*F]
            self.feature_taps = feature_taps.contiguous() if config.use_delta_features else None
            # Conv-1 bias rides on the centre tap of every word (a padded row is masked anyway).
            self.conv1_bias = param(model.convs[0].bias)  # [F]
            self.bias_taps = torch.zeros(k * n_f, device=device)  # [k*F]
            self.bias_taps[self.left * n_f : (self.left + 1) * n_f] = self.conv1_bias
            # Conv layers 2..N_C: one [F_in, F_out] matrix per tap.
            self.convs = [
                (param(conv.weight).permute(2, 1, 0).contiguous(), param(conv.bias)) for conv in model.convs[1:]
            ]  # [k, F_in, F_out], [F_out]
            self.dense = [(param(layer.weight).t().contiguous(), param(layer.bias)) for layer in model.dense]
            self.lex_mean, self.lex_std = param(model.lex_mean), param(model.lex_std)

    @classmethod
    def from_model(cls, model: DeltaModel, device: str | torch.device | None = None) -> DeltaScorer:
        """Precompute the tables of ``model`` on ``device`` (None = CUDA if available else CPU)."""
        return cls(model, resolve_device(device))

    @property
    def device(self) -> torch.device:
        """Where the scorer's tensors live and its forward passes run."""
        return self._device

    @property
    def cuda_graphs(self) -> bool:
        """Whether the dense forward is replayed as CUDA graphs."""
        return self._graphs is not None

    # -- public API -----------------------------------------------------------------------

    def score(self, query_rows: np.ndarray, doc_rows: np.ndarray, lex: np.ndarray | None) -> np.ndarray:
        """Scores float32 [n] of n documents (rows [n, N], 0 = PAD) for one query (rows [M])."""
        return self.score_many([(query_rows, doc_rows, lex)])[0]

    def score_many(self, requests: Sequence[Request]) -> list[np.ndarray]:
        """One float32 score array per (query_rows, doc_rows, lex) request.

        Consecutive requests go through one forward pass per ``group_docs`` documents
        (``CPU_GROUP_DOCS`` in the sparse layout, ``DENSE_GROUP_DOCS`` in the dense one).
        """
        checked = [self._check(i, *request) for i, request in enumerate(requests)]
        sizes = [docs.shape[0] for _, docs, _ in checked]
        scores = []
        with torch.inference_mode():
            for group in request_groups(checked, sizes, self.group_docs):
                if self.layout == "dense":
                    scores.append(self._forward_dense(group))
                else:
                    scores.append(self._forward(group, SparsePlan.build(group, self.gap)).cpu().numpy())
        if not scores:
            return [np.zeros(0, np.float32) for _ in sizes]
        return list(np.split(np.concatenate(scores), np.cumsum(sizes)[:-1]))

    # -- stages ---------------------------------------------------------------------------

    def _check(self, index: int, query_rows: np.ndarray, doc_rows: np.ndarray, lex: np.ndarray | None) -> Request:
        """Validate one request on the host (cheap; a bad id would crash a CUDA kernel)."""
        query_rows = np.array(query_rows, dtype=np.int64).reshape(-1)  # a private, writable copy
        doc_rows = np.asarray(doc_rows, dtype=np.int64)
        if doc_rows.ndim != 2:
            raise ValueError(f"request {index}: doc_rows must be 2-D [n_docs, doc_len], got shape {doc_rows.shape}")
        for name, rows in (("query_rows", query_rows), ("doc_rows", doc_rows)):
            if rows.size and (rows.min() < 0 or rows.max() >= self.n_words):
                raise ValueError(
                    f"request {index}: {name} holds ids outside [0, {self.n_words}); "
                    "map tokens to rows of the model's embedding table"
                )
        if self.n_lex:
            if lex is None:
                raise ValueError(
                    f"request {index}: the model uses {self.n_lex} Lex features "
                    f"{self.config.lex_names}; pass lex [n_docs, {self.n_lex}]"
                )
            lex = np.asarray(lex, dtype=np.float32)
            if lex.shape != (doc_rows.shape[0], self.n_lex):
                raise ValueError(
                    f"request {index}: lex has shape {lex.shape}, expected ({doc_rows.shape[0]}, {self.n_lex})"
                )
        elif lex is not None and np.size(lex):
            raise ValueError(f"request {index}: this model uses no Lex features; pass lex=None")
        if query_rows.size == 0:
            query_rows = np.zeros(1, np.int64)  # an empty query behaves as an all-PAD one
        return query_rows, doc_rows, lex

    def _forward(self, requests: Sequence[Request], plan: SparsePlan) -> torch.Tensor:
        """Scores [n_total] for the requests laid out by ``plan``."""
        device, k, n_f, gap = self._device, self.k, self.n_f, self.gap
        # Conv-1 tap contributions of every distinct word of every request, plus the PAD row.
        contributions = torch.empty(plan.n_rows + 1, k * n_f, device=device)  # [sum U + 1, k*F]
        for (query_rows, _, _), (start, words) in zip(requests, plan.words):
            if len(words):
                self._word_contributions(query_rows, words, contributions[start : start + len(words)])
        contributions[plan.n_rows] = self.bias_taps
        # Layer 1: output row r sums tap t of the word at r + t - left: one embedding_bag.
        rows = torch.from_numpy(plan.rows).to(device)  # [L + 2 gap]
        length = rows.shape[0] - 2 * gap
        bags = torch.stack(
            [rows[gap + t - self.left : gap + t - self.left + length] * k + t for t in range(k)], dim=1
        )  # [L, k]
        y = F.embedding_bag(bags, contributions.view(-1, n_f), mode="sum")  # [L, F]
        padding = torch.from_numpy(plan.padding).to(device)  # [L - n_real] rows to zero
        for weight, bias in self.convs:
            y = F.leaky_relu_(y, self.slope).index_fill_(0, padding, 0.0)  # masked activation
            out = torch.empty_like(y)  # [L, F]
            out[:gap] = 0
            out[length - gap :] = 0
            inner = out[gap : length - gap]
            for t in range(k):
                shift = t - self.left
                source = y[gap + shift : length - gap + shift]
                if t == 0:
                    torch.addmm(bias, source, weight[t], out=inner)
                else:
                    inner.addmm_(source, weight[t])
            y = out
        y = F.leaky_relu_(y, self.slope).index_fill_(0, padding, float("-inf"))
        n_docs, width = plan.n_docs, plan.width
        pooled = y[gap:].view(n_docs, width + gap, n_f).amax(dim=1)  # [n, F]
        lex = None
        if self.n_lex:
            lex = torch.from_numpy(np.concatenate([rows for _, docs, rows in requests if docs.shape[0]])).to(device)
        return self._head(pooled, lex)  # [n]

    def _head(self, pooled: torch.Tensor, lex: torch.Tensor | None) -> torch.Tensor:
        """[B] scores from the pooled convolutions [B, F] (-inf: an all-padding document) and Lex features [B, L]."""
        pooled = pooled.masked_fill_(torch.isinf(pooled), 0.0)  # an all-padding document pools to 0
        if self.n_lex:
            if lex is None:
                raise ValueError(f"this model reads {self.n_lex} Lex features: pass lex as [B, {self.n_lex}]")
            pooled = torch.cat([pooled, (lex - self.lex_mean) / self.lex_std], dim=1)  # [B, F + L]
        for weight, bias in self.dense:
            pooled = F.leaky_relu(torch.addmm(bias, pooled, weight), self.slope)
        return pooled[:, 0]  # [B]

    def _word_contributions(self, query_rows: np.ndarray, words: np.ndarray, out: torch.Tensor) -> None:
        """Write the conv-1 tap contributions [U, k*F] of each document word's Delta vector into out."""
        device = self._device
        query_valid = query_rows != PAD_ID
        query = torch.from_numpy(query_rows).to(device)  # [M]
        words_t = torch.from_numpy(words).to(device)  # [U]
        q_vectors = self.embeddings.index_select(0, query)  # [M, V]
        dots = self.embeddings.index_select(0, words_t) @ q_vectors.t()  # [U, M]
        sq_d = self.sq_norm.index_select(0, words_t)  # [U]
        sq_q = self.sq_norm.index_select(0, query)  # [M]
        if query_valid.any():
            # squared distances the way torch.cdist computes them: |d|^2 - 2 d.q + |q|^2
            sq = dots.mul(-2).add_(sq_d[:, None]).add_(sq_q[None, :])  # [U, M]
            if not query_valid.all():
                sq.masked_fill_(torch.from_numpy(~query_valid).to(device)[None, :], float("inf"))
            sq_closest, closest = sq.min(dim=1)  # [U]
        else:  # all-PAD query: the reference's argmin over all-inf distances picks position 0
            closest = torch.zeros(len(words), dtype=torch.int64, device=device)
            sq_closest = sq_d + sq_q[0] - 2 * dots[:, 0]
        # Z = P[d] + [Delta features, onehot(closest)] @ [feature taps; bias - P[q_j]]: one
        # gather and one small matmul (each row's one-hot sums to 1, so it carries the bias).
        per_query = self.bias_taps.expand(len(query_rows), -1)  # [M, k*F]
        if self.table is not None:
            per_query = per_query - self.table.index_select(0, query)
        one_hot = torch.zeros(len(words), len(query_rows), device=device).scatter_(1, closest[:, None], 1.0)  # [U, M]
        if self.feature_taps is None:
            inputs, weights = one_hot, per_query
        else:
            features = self._delta_features(
                words_t, query, q_vectors, dots, sq_d=sq_d, sq_closest=sq_closest, closest=closest
            )
            inputs = torch.cat([features, one_hot], dim=1)
            weights = torch.cat([self.feature_taps, per_query])  # [3 + M, k*F]
        if self.table is not None:
            torch.index_select(self.table, 0, words_t, out=out)
            out.addmm_(inputs, weights)
        else:
            torch.mm(inputs, weights, out=out)

    def _delta_features(
        self,
        words: torch.Tensor,
        query: torch.Tensor,
        q_vectors: torch.Tensor,
        dots: torch.Tensor,
        *,
        sq_d: torch.Tensor,
        sq_closest: torch.Tensor,
        closest: torch.Tensor,
    ) -> torch.Tensor:
        """[cos, |d - q*|, 1 - |d - q*| / (|d| + |q*|)] per document word [U, 3], from the words' dot products
        with the query [U, M], their squared norms, and the closest query word's slot and squared distance."""
        q_star = query.index_select(0, closest)  # [U] embedding rows of the closest query words
        distance = sq_closest.clamp_min(0).sqrt_()  # [U]
        # The expansion loses digits when d ~ q* (an exact match above all): recompute those
        # few exactly, as the reference does (|d - q*| = 0 for a match).
        sq_dq = sq_d + self.sq_norm.index_select(0, q_star)  # [U] |d|^2 + |q*|^2
        near = torch.nonzero(sq_closest < NEAR_FRACTION * sq_dq)[:, 0]
        if len(near):
            distance[near] = (
                self.embeddings.index_select(0, words.index_select(0, near))
                - q_vectors.index_select(0, closest.index_select(0, near))
            ).norm(dim=1)
        return _delta_word_features(
            dots.gather(1, closest[:, None])[:, 0],
            distance,
            self.norm.index_select(0, words),
            self.norm.index_select(0, q_star),
        )  # [U, 3]

    # -- dense layout (GPU) -----------------------------------------------------------------

    def _forward_dense(self, requests: Sequence[Request]) -> np.ndarray:
        """Scores [n_total] of the requests, every request padded to one [n_max, width] block.

        One pass of batched tensor ops whatever the number of requests: no per-request
        loop and no de-duplication, so a GPU runs ~80 kernels per group with one
        device->host copy at the end. The Delta stage is computed per position, as in
        the reference, but conv 1 still comes from the word table P.
        """
        # Under CUDA graphs, shapes are rounded up (most windows hold a full N-word document).
        bucket_width = self.config.doc_len if self.cuda_graphs else None
        batch = DenseBatch.build(requests, self.config.query_len, bucket_width)
        if self._graphs is not None:
            scores = self._graphs.run(batch.arrays)  # [R, n_max]
        else:
            scores = self._dense_scores(*(torch.from_numpy(a).to(self._device) for a in batch.arrays)).cpu().numpy()
        return np.concatenate([scores[i, :n] for i, n in enumerate(batch.sizes)])

    def _dense_scores(
        self, ids: torch.Tensor, query: torch.Tensor, excluded: torch.Tensor, lex: torch.Tensor
    ) -> torch.Tensor:
        """Scores [R, n_max] from the device tensors of a ``DenseBatch`` (no host sync)."""
        k, n_f, left = self.k, self.n_f, self.left
        n_req, n_max, width = ids.shape  # ids [R, n_max, W]; query, excluded [R, M]
        flat = ids.view(n_req, n_max * width)  # [R, S], S = n_max * W
        q_vectors = self.embeddings[query]  # [R, M, V]
        parts = []  # conv-1 tap contributions [R, S, k*F] of each position
        if self.table is not None:
            parts.append(self.table[flat])  # P[d]
        d_vectors = self.embeddings[flat]  # [R, S, V]
        dots = torch.bmm(d_vectors, q_vectors.transpose(1, 2))  # [R, S, M]
        sq = dots.mul(-2).add_(self.sq_norm[flat][:, :, None]).add_(self.sq_norm[query][:, None, :])
        closest = sq.masked_fill_(excluded[:, None, :], float("inf")).argmin(dim=2)  # [R, S]
        q_star = query.gather(1, closest)  # [R, S] embedding rows of the closest query words
        if self.table is not None:
            parts.append(-self.table[q_star])  # -P[q*]
        if self.feature_taps is not None:
            q_star_vectors = q_vectors.gather(1, closest[:, :, None].expand(-1, -1, q_vectors.shape[2]))
            distance = (d_vectors - q_star_vectors).norm(dim=2)  # [R, S], exact as in the reference
            features = _delta_word_features(
                dots.gather(2, closest[:, :, None])[:, :, 0], distance, self.norm[flat], self.norm[q_star]
            )  # [R, S, 3]
            parts.append(features @ self.feature_taps)
        taps = torch.stack(parts).sum(dim=0) if len(parts) > 1 else parts[0]  # [R, S, k*F]
        mask = (ids != PAD_ID).view(n_req * n_max, width)  # [B, W], B = R * n_max documents
        taps = taps.view(n_req * n_max, width, k, n_f) * mask[:, :, None, None]  # PAD positions add nothing
        # 'same' convolution: output i sums tap t of the input at i + t - left.
        taps = F.pad(taps, (0, 0, 0, 0, left, k - 1 - left))  # [B, W + k - 1, k, F]
        y = self.conv1_bias + sum(taps[:, t : t + width, t] for t in range(k))  # [B, W, F]
        mask_f = mask[:, :, None].to(y.dtype)  # [B, W, 1]
        y = F.leaky_relu(y, self.slope) * mask_f
        for weight, bias in self.convs:  # weight [k, F_in, F_out]
            padded = F.pad(y, (0, 0, left, k - 1 - left))  # [B, W + k - 1, F]
            y = bias + sum(padded[:, t : t + width] @ weight[t] for t in range(k))  # [B, W, F]
            y = F.leaky_relu(y, self.slope) * mask_f
        pooled = y.masked_fill(~mask[:, :, None], float("-inf")).amax(dim=1)  # [B, F]
        flat_lex = lex.view(n_req * n_max, self.n_lex) if self.n_lex else None  # [B, L]
        return self._head(pooled, flat_lex).view(n_req, n_max)


def _delta_word_features(
    dot: torch.Tensor, distance: torch.Tensor, d_norm: torch.Tensor, q_norm: torch.Tensor
) -> torch.Tensor:
    """[..., 3] = [cos, |d - q*|, 1 - |d - q*| / (|d| + |q*|)] per word from d.q*, |d - q*|, |d| and |q*| [...]."""
    cosine = dot / (d_norm.clamp_min(COS_EPS) * q_norm.clamp_min(COS_EPS))
    proximity = 1 - distance / (d_norm + q_norm).clamp_min(PROX_EPS)
    return torch.stack([cosine, distance, proximity], dim=-1)


def _row_sq_norms(embeddings: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
    """Squared L2 norm of every row [W]."""
    out = torch.empty(embeddings.shape[0], dtype=torch.float32, device=embeddings.device)
    for start in range(0, embeddings.shape[0], chunk):
        out[start : start + chunk] = embeddings[start : start + chunk].pow(2).sum(dim=1)
    return out


def _word_table(embeddings: torch.Tensor, taps: torch.Tensor, chunk: int = 32768) -> torch.Tensor:
    """E @ taps [W, k*F], accumulated in float64 so the table adds no rounding of its own."""
    taps64 = taps.double()
    out = torch.empty(embeddings.shape[0], taps.shape[1], dtype=torch.float32, device=embeddings.device)
    for start in range(0, embeddings.shape[0], chunk):
        out[start : start + chunk] = (embeddings[start : start + chunk].double() @ taps64).float()
    return out

# One image for the gateway (`esrr serve`), the scoring workers (`esrr worker start`) and
# the admin jobs (`esrr index build`, ...); docker-compose.yml runs each as a service.
# torch is pinned exactly, from PyTorch's CPU index unless TORCH_INDEX_URL names a CUDA one.
FROM python:3.11-slim
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /app
RUN pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" torch==2.13.0
COPY pyproject.toml README.md ./
COPY es_rerank es_rerank
COPY worker worker
# Not served: `esrr train` and `esrr eval` (an operator's check of a collection) run from the image too.
COPY training training
COPY index_setup index_setup
RUN pip install --no-cache-dir ".[model,opensearch]"
# The candidate feedback's kernels (es_rerank/ranking/similar_hits.py, heaviest_terms.py) compiled once into the
# image, not at each container's start; writable by any user, as compose runs the services as the host's.
ENV NUMBA_CACHE_DIR=/app/numba-cache
RUN python -c "from es_rerank.ranking import heaviest_terms, similar_hits; similar_hits.warm_up(); heaviest_terms.warm_up()" \
    && chmod -R a+rwX /app/numba-cache
ENV ESRR_HOME=/data/esrr ESRR_NFCORPUS=/data/nfcorpus PYTHONUNBUFFERED=1
# Not root: compose runs the services as the host user that owns ESRR_HOME_HOST (ESRR_UID).
RUN useradd --uid 1000 --user-group --create-home esrr && mkdir -p /data/esrr && chown esrr:esrr /data/esrr
USER esrr
ENTRYPOINT ["esrr"]

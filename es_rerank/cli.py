"""The ``esrr`` command: assembles the sub-commands each package defines.

Sub-commands are imported only when invoked, so ``esrr index ...`` never loads
torch and ``esrr --help`` is instant.
"""

from __future__ import annotations

import errno
import importlib

import click

from es_rerank.errors import OptionsError, SetupError


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use.

    ``lazy_subcommands`` maps a name to ``(module:attribute, one-line help)``; the
    help line lets ``--help`` list commands without importing them.
    """

    def __init__(self, *args, lazy_subcommands: dict[str, tuple[str, str]] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = lazy_subcommands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Loaded and lazy sub-commands, sorted."""
        return sorted([*super().list_commands(ctx), *self.lazy_subcommands])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The sub-command, importing a lazy one only now."""
        if name not in self.lazy_subcommands:
            return super().get_command(ctx, name)
        module_name, attribute = self.lazy_subcommands[name][0].split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def invoke(self, ctx: click.Context) -> object:
        """Run the sub-command; a file-system error (read-only ESRR_HOME, a file where a folder
        belongs) becomes a clear CLI error instead of a traceback."""
        try:
            return super().invoke(ctx)
        except SetupError as error:  # the library's errors (es_rerank.errors), as the command line's
            raise self._as_click_error(ctx, error) from None
        except OSError as error:
            if error.errno in (errno.ENOSPC, errno.EDQUOT):  # often raised without a file name
                raise click.ClickException(
                    f"{error.strerror} ({error.filename or 'while writing'}); free "
                    "space where ESRR_HOME and --out point, or point them elsewhere"
                ) from None
            if error.filename is None:  # sockets and the like: not a path problem, keep the traceback
                raise
            raise click.ClickException(
                f"cannot use {error.filename}: {error.strerror}; check that ESRR_HOME and the paths given "
                "exist where they should and are writable"
            ) from None

    def _as_click_error(self, ctx: click.Context, error: SetupError) -> click.ClickException:
        """A usage error of the sub-command invoked (its usage shown, status 2) for contradicting options; else a
        CLI error (status 1)."""
        if not isinstance(error, OptionsError):
            return click.ClickException(str(error))
        name = ctx.invoked_subcommand
        command = self.get_command(ctx, name) if name is not None else None
        usage_of = click.Context(command, info_name=name, parent=ctx) if command is not None else ctx
        return click.UsageError(str(error), ctx=usage_of)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The help listing; lazy commands show their registered short help, without an import."""
        rows = [
            (
                name,
                self.lazy_subcommands[name][1]
                if name in self.lazy_subcommands
                else self.commands[name].get_short_help_str(),
            )
            for name in self.list_commands(ctx)
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    lazy_subcommands={
        "index": ("index_setup.cli:index", "Load the corpus; build, replace and inspect indexes."),
        "generate": ("index_setup.generate:generate", "Generate synthetic PubMed-like corpora for scale tests."),
        "search": (
            "worker.search:search",
            "Search the served index from the shell (reranked when a model is trained).",
        ),
        "batch-search": (
            "worker.batch_search:batch_search",
            "Rank every query of a file with the served pipeline; write a TREC run.",
        ),
        "embeddings": ("index_setup.embeddings:embeddings", "Train and inspect the word2vec embeddings."),
        "neighbours": (
            "index_setup.neighbours:neighbours",
            "Build the judged-neighbours votes from NFCorpus train judgments.",
        ),
        "experiment": (
            "es_rerank.learning.experiment_cli:experiment",
            "An interleaving experiment (ESRR_EXPERIMENT): its report, and promoting its candidate.",
        ),
        "train": ("training.commands.train:train", "Train a Delta model on NFCorpus train, early-stopped on dev."),
        "select-features": (
            "training.commands.select_features:select_features",
            "Greedy Lex-feature selection on NFCorpus dev (section 5.1).",
        ),
        "eval": ("training.commands.evaluate:evaluate", "Evaluate BM25 and the Delta models on NFCorpus test."),
        "shift": (
            "training.commands.shift:shift",
            "Write shifted copies of NFCorpus (long queries, blank titles, held-out topics).",
        ),
        "worker": ("worker.cli:worker", "Run the Celery scoring worker."),
        "simulate": (
            "es_rerank.learning.cli:simulate",
            "Simulated users search a running gateway and click by a cascade model (events for learning).",
        ),
        "learn": (
            "es_rerank.learning.cli:learn",
            "Fit a click model to the stored clicks; judgments from it rebuild the judged-neighbour votes.",
        ),
        "serve": (
            "es_rerank.gateway.cli:serve",
            "Serve an Elasticsearch-shaped _search over HTTP, reranked by the workers.",
        ),
    },
)
@click.version_option(package_name="es-rerank")
def main() -> None:
    """es-rerank: BM25 retrieval reranked by the Delta-32-Lex3 model."""


@main.group(
    cls=LazyGroup,
    lazy_subcommands={
        "index": ("benchmarks.index:bench_index", "Tokenize+statistics rate, index build time, BM25 latency."),
        "score": ("benchmarks.score:bench_score", "Reference vs fast Delta scorer latency, throughput and RSS."),
        "search": ("benchmarks.search:bench_search", "Per-stage latency of the served search on the dev queries."),
        "roundtrip": (
            "benchmarks.roundtrip:bench_roundtrip",
            "rerank.score through the broker against a running worker: latency and throughput.",
        ),
        "http": ("benchmarks.http:bench_http", "A running gateway's latency and searches/s over HTTP."),
        "integrity": (
            "benchmarks.integrity:bench_integrity",
            "What checking the statistics costs: checksums, opening a version, the check per search.",
        ),
        "scale": (
            "benchmarks.scale:bench_scale",
            "Build and serve generated PubMed-like corpora (10k, 100k, 1M): rate, memory, latency, 36M projection.",
        ),
        "slow-clients": (
            "benchmarks.slow_clients:bench_slow_clients",
            "Searches answered while many connections hang half-sent (slow clients).",
        ),
        "agreement": (
            "benchmarks.agreement:bench_agreement",
            "Top-10 overlap of the embedded index and real Elasticsearch (Lucene) BM25 on NFCorpus queries.",
        ),
        "chaos": (
            "benchmarks.chaos:bench_chaos",
            "Load with faults injected (worker killed, broker stopped): failed, fell back, latency.",
        ),
        "events": (
            "benchmarks.events_store:bench_events",
            "Size on disk and write time of 1M synthetic events in the SQLite event store.",
        ),
        "attack": (
            "benchmarks.attack:bench_attack",
            "Every hostile request of issues 25 and 32 against a gateway: status, CPU, memory, probe latency.",
        ),
    },
)
def bench() -> None:
    """Benchmarks that print measured figures (see the README for how they were run)."""

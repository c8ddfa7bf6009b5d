"""Training-curve chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def plot_training_curve(history: Sequence[dict[str, float]], path: Path, title: str) -> None:
    """Loss and dev NDCG@20 per epoch, on two axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, loss_axis = plt.subplots(figsize=(6, 3.5))
    loss_axis.plot(epochs, [h["loss"] for h in history], "o-", color="tab:blue", label="train loss")
    loss_axis.set_xlabel("epoch")
    loss_axis.set_ylabel("weighted hinge loss", color="tab:blue")
    dev_axis = loss_axis.twinx()
    dev_axis.plot(epochs, [h["dev_ndcg20"] for h in history], "s-", color="tab:red", label="dev NDCG@20")
    dev_axis.set_ylabel("dev NDCG@20 (2^rel-1)", color="tab:red")
    loss_axis.set_title(f"{title}: training curve")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

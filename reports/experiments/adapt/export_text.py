"""Write one of the extra text sources of ../shared/data as a BEIR corpus with its titles, for `esrr train --adapt`.

    python reports/experiments/adapt/export_text.py ohsumed OUT_DIR [DATA_ROOT]

The records and ids are those `esrr shift --condition ohsumed-pseudo` reads (the same reader, the
title as the first part), so `esrr train --adapt OUT_DIR` holds out exactly that condition's 300
test titles. No judgments are written: adaptation needs none.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from index_setup.text_sources import SOURCES


def main(name: str, out: Path, data_root: Path) -> None:
    source = next(s for s in SOURCES if s.name == name)
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    with gzip.open(out / "corpus.jsonl.gz", "wt", encoding="utf-8") as corpus:
        for path in source.files(data_root):
            for text in source.reader(path):
                corpus.write(
                    json.dumps({"_id": text.doc_id, "title": text.parts[0], "text": " ".join(text.parts[1:])}) + "\n"
                )
                count += 1
    print(f"{name}: {count} records -> {out / 'corpus.jsonl.gz'}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else Path("../shared/data"))

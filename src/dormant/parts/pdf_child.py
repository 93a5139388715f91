"""The child process that reads a PDF's pages and text (run by :func:`dormant.parts.extract.pdf_text`).

Run as a script (``python -I pdf_child.py PAGES CHARS``, the PDF on stdin), never
imported by dormant itself: it imports only ``pypdf``, so it starts in a fraction of a
second, and the parent bounds it in time (killed past its timeout) and address space
(``prlimit --as``). It writes one JSON line with the page count as soon as it is known,
flushed, then one with the text (or an error), so a parent that had to kill it still
knows whether the page limit was checked.
"""

from __future__ import annotations

import io
import json
import sys


def main() -> int:
    """Read the PDF on stdin; print ``{"pages": n}`` then ``{"text": ...}`` or ``{"error": ...}``."""
    max_pages, max_chars = int(sys.argv[1]), int(sys.argv[2])
    data = sys.stdin.buffer.read()
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = len(reader.pages)
        print(json.dumps({"pages": pages}), flush=True)
        if pages > max_pages:
            return 0
        out: list[str] = []
        size = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            out.append(text)
            size += len(text)
            if size >= max_chars:
                break
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 0
    print(json.dumps({"text": "\n".join(out).strip()[:max_chars]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

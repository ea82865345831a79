"""What milepost shows people and CI, made from what the library returns:
the DAG as text and diagrams with the one colour map (``diagram``), as a
picture (``picture``: SVG, HTML, PNG), the terminal's tables (``terminal``),
the drive's live view (``live``) and the reports where CI looks (``report``:
JUnit XML, GitHub's step summary).

Presentation sits above the store and the service (a report reads the runs'
tails through the service) and below the flows (the drive's summary artifact
draws the same picture) and the interfaces, which choose what goes where.
Nothing here imports Prefect."""

__all__: list[str] = []

"""The data contract between loader and report: RunData, validation at the edge, frames,
performance.json records."""

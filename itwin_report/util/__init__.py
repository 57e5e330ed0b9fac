"""Infrastructure that knows nothing of reports: errors and exit codes, masking, atomic
writes, progress, signals, wording helpers."""

"""Imported first by the fork server of the trace workers (and by nothing else): from here on,
it and every worker forked from it ignore Ctrl-C, which the command handles for all of them
(:mod:`~itwin_report.traces.workers`)."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

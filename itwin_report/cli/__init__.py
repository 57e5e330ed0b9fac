"""Command line: the group, one module per command (errors become exit codes in ``group``).

Only click and light modules are imported here, so ``itwin-report --help`` stays fast; the
commands import the loader, the report and the plots when they run.
"""

from __future__ import annotations

import click

from itwin_report import __version__
from itwin_report.cli.compare_cmd import compare_command
from itwin_report.cli.emulate_cmd import emulate_command
from itwin_report.cli.group import ReportGroup
from itwin_report.cli.merge_cmd import merge_performance
from itwin_report.cli.report_cmd import generate_scalability_report
from itwin_report.cli.traces_cmd import analyze_traces_command

MAIN_HELP = """Scalability reports for distributed deep-learning runs logged to MLflow.

\b
Try it with emulated data:
  itwin-report emulate
  itwin-report generate-scalability-report --experiment-name emulated-cluster
"""


def _main_help() -> str:
    """The group's help: the text above, then every exit code of :mod:`itwin_report.util.errors`."""
    from itwin_report.util.errors import EXIT_CODES

    codes = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())
    return f"{MAIN_HELP}\n\b\nExit codes:\n{codes}\n"


@click.group(
    cls=ReportGroup,
    help=_main_help(),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="itwin-report")
def main() -> None:
    """Scalability reports for distributed deep-learning runs logged to MLflow."""


main.add_command(generate_scalability_report)
main.add_command(merge_performance)
main.add_command(emulate_command)
main.add_command(compare_command)
main.add_command(analyze_traces_command)

__all__ = ["main"]

if __name__ == "__main__":
    main()

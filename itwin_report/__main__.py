"""Allow ``python -m itwin_report``: Ctrl-C is handled before anything else is imported."""

from itwin_report.util.interrupt import exit_at_once_on_sigint

exit_at_once_on_sigint()

from itwin_report.cli import main  # noqa: E402  (after the SIGINT handling, on purpose)

if __name__ == "__main__":
    main()

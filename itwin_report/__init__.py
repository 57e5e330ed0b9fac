"""itwin-report: scalability reports for distributed deep-learning runs logged to MLflow."""

__version__ = "0.1.0"

"""Pure statistics on report tables: the regression comparison between two reports."""

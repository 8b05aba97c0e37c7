"""What a compile leaves: report.json and the summary (`build`), the performance results
(`results`), the output folder's files (`artifacts`) and its rules (`outdir`), the checks of
loaded products (`products`) and `wsecc diff` (`diff`).
"""

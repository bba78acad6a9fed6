"""`hybrid-gateway bench learn`: issue 23's goals measured as learning curves (docs/learning.md).

- ``router_curve``: a gateway with router audits (``marks`` judge) serves the hard workload's
  first part; at each label checkpoint ``router train --from-log`` retrains, and the shipped and
  the retrained models are scored (APGR, cost) on the workload's later, unseen part.
- ``cache_curve``: a paraphrase-heavy workload through a gateway with the bundled semantic
  calibration and through one whose threshold follows its cache audits; hits and false hits
  over labels bought, then ``cache eval`` on pair files the run never sent.
"""

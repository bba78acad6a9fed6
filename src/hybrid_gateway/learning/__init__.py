"""Learning from live traffic: audited decisions (issue 23).

Runtime (imported by the gateway):

settings  ``learning.audit`` in the config
verdict   the rubric (fixed, versioned) and the strict verdict parser
judges    the ``Judge`` seam: ``llm`` (the rubric sent to a lane), ``marks`` (the emulator's
          quality marks), ``feedback`` (a human rating through ``/v1/feedback``)
spend     who may be audited now: sampling, the daily spend cap per tenant (injected wall clock)
auditor   the background shadow requests: a light answer also sent to the heavy lane, a
          semantic-cache hit also answered fresh; bounded, dropped first under load
store     verdicts next to the request log (SQLite; ``store_pg`` for PostgreSQL)
metrics   the audit counters on the gateway's registry
build     the runtime objects from the config
"""

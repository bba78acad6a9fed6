"""The weekly misroute review (`hybrid-gateway misroutes`).

reader   -> the SQL over the request log's ``requests`` and ``feedback`` tables
collect  -> flagged requests: thumbs-down and re-asks
vectors  -> one embedding per distinct prompt
cluster  -> flagged prompts grouped by meaning
keywords -> n-grams that pick a cluster out of the unflagged traffic
proposals-> config edits per cluster (and category gates across them)
replay   -> the logged traffic routed under the config as is and as proposed
analysis -> all of the above, ranked
report   -> JSON, Markdown, HTML;  cli -> the command
"""

from hybrid_gateway.review.analysis import Cluster, Ranked, Review, run_review
from hybrid_gateway.review.collect import Collection, Flagged, ReviewError
from hybrid_gateway.review.proposals import Edit, Proposal
from hybrid_gateway.review.reader import LoggedRequest, LogReader
from hybrid_gateway.review.replay import Effect

__all__ = [
    "Cluster",
    "Collection",
    "Edit",
    "Effect",
    "Flagged",
    "LogReader",
    "LoggedRequest",
    "Proposal",
    "Ranked",
    "Review",
    "ReviewError",
    "run_review",
]

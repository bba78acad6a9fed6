"""The user messages `bench overhead` sends: unique per request, in three kinds.

    classic  ``What is the capital of France? #<tag>`` (the pass-through bench since issue 2)
    short    ``How do I reset the password of account <tag>?``: about 60 characters
    long     fifteen support-note sentences in an order that turns with the counter, then a
             unique question: about 2,000 characters (~400 tokens for the bundled embedder)

``<tag>`` is ``<run token>-<wrk thread>-<counter>``: new for every request, and it survives the
semantic cache's noise stripping (a 12-character token is shorter than the 16 hex characters
the stripper removes), so no request is an exact hit and a near one fails the numbers guard:
every request takes the whole smart path (embed, search, judge, route, relay, store).

The same text is built by the wrk Lua script (``wrk.py``) and by ``prompt_text`` here (the
in-process stage profile and the open-loop client); a test keeps the two in step.
"""

from __future__ import annotations

__all__ = ["PROMPT_KINDS", "SENTENCES", "lua_sentences", "prompt_text"]

PROMPT_KINDS = ("classic", "short", "long")

SENTENCES = (
    "The customer wrote in on Monday because the invoice for the March subscription showed the "
    "annual plan price instead of the monthly one.",
    "She had switched plans in February through the billing page, and the confirmation email "
    "said the change would apply from the next cycle.",
    "Her team uses the workspace for weekly planning, shared documents and a small set of "
    "automations that post summaries into their chat channel.",
    "Two of the automations stopped running after the plan change, which she noticed when the "
    "Friday summary did not arrive.",
    "She also asked whether the storage limit of the monthly plan is enough for the design "
    "files the team keeps in the shared drive.",
    "The account has eleven members, three of them guests from an agency that works on the "
    "spring campaign.",
    "According to the audit log, one of the guests changed the notification settings of the "
    "whole workspace during the same week.",
    "The customer would like the invoice corrected, the automations restored and a short "
    "explanation she can forward to her finance department.",
    "She mentioned that the finance department closes the books on the fifth working day of "
    "each month and needs the corrected invoice before then.",
    "Support already checked that the payment method on file is valid and that no payment "
    "failed during the last three billing cycles.",
    "The automations are built with the visual editor and use the scheduled trigger, the "
    "document search action and the chat message action.",
    "The scheduled trigger is limited to fifty runs per day on the monthly plan, while the "
    "annual plan allows two hundred runs per day.",
    "Her workspace ran about ninety automation runs per day in February, mostly from a "
    "reminder flow that fires every fifteen minutes.",
    "The customer is not sure whether she wants to stay on the monthly plan or return to the "
    "annual one once the campaign is over.",
    "She asked for a comparison of both plans that covers storage, automation limits, guest "
    "seats and the price per member.",
)


def lua_sentences() -> str:
    """The sentences as a Lua table body (they hold no quote, backslash or JSON escape)."""
    return ", ".join(f'"{s}"' for s in SENTENCES)


def prompt_text(kind: str, tag: str, counter: int) -> str:
    """The user message of request number ``counter`` (1-based, as in the Lua script)."""
    if kind == "short":
        return f"How do I reset the password of account {tag}?"
    if kind == "long":
        start = counter % len(SENTENCES)
        turned = SENTENCES[start:] + SENTENCES[:start]
        return " ".join(turned) + f" Question {tag}: what does the note ask for?"
    if kind == "classic":
        return f"What is the capital of France? #{tag}"
    raise ValueError(f"prompt kinds are {', '.join(PROMPT_KINDS)}; got {kind!r}")

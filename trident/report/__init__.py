"""The run record and its views: text timeline, JSON, PNG."""
from trident.report.record import Action, Event, ExecutionRecord, RunRecord, summarize

__all__ = ["Action", "Event", "ExecutionRecord", "RunRecord", "summarize"]

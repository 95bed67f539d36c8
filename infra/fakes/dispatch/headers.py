"""The headers Cloud Tasks sends with each attempt of an HTTP task, as the dispatcher and the tests send them."""

from __future__ import annotations


def cloud_tasks_headers(*, queue: str, task: str, retry: int, executions: int, eta: float) -> dict[str, str]:
    """Cloud Tasks' own request headers for one attempt (``retry`` counts earlier attempts, ``executions`` those
    that got an answer)."""
    return {
        "X-CloudTasks-QueueName": queue,
        "X-CloudTasks-TaskName": task,
        "X-CloudTasks-TaskRetryCount": str(retry),
        "X-CloudTasks-TaskExecutionCount": str(executions),
        "X-CloudTasks-TaskETA": f"{eta:.6f}",
    }

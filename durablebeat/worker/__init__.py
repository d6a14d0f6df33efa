"""The worker side: run tracking from Celery signals, completion, orphan reclaim."""

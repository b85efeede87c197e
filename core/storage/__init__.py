"""What thread history costs and how it is kept small: storage per thread and channel (storage.py,
storage_detail.py) and history pruning (prune.py, its pure plan prune_plan.py)."""

"""The pure core: schedule math, the firing policy, the clock seam. No database, no clock reads."""

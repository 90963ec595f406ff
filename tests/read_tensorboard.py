#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reads a Mantissa TensorBoard export (one run's folder) with the real tensorboard package and
prints JSON: {"scalars": {tag: [[step, value, wall_time], ...]} (a value that is not finite as
the string "nan", "inf" or "-inf": JSON has no token for it),
 "histograms": {tag: [[step, [counts...], [bucket limits...], min, max, num], ...]}}."""
import json
import math
import sys

from tensorboard.backend.event_processing import event_accumulator

acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "histograms": 0})
acc.Reload()
tags = acc.Tags()
out = {"scalars": {}, "histograms": {}}
for tag in tags["scalars"]:
    out["scalars"][tag] = [[e.step, e.value if math.isfinite(e.value) else str(e.value), e.wall_time]
                           for e in acc.Scalars(tag)]
for tag in tags["histograms"]:
    out["histograms"][tag] = [[e.step, list(e.histogram_value.bucket), list(e.histogram_value.bucket_limit),
                               e.histogram_value.min, e.histogram_value.max, e.histogram_value.num]
                              for e in acc.Histograms(tag)]
json.dump(out, sys.stdout)

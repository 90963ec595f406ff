// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// How the Runs and Compare pages write run figures: the same units and precision in every
// table, NaN / -1 ("the run has none") as an en dash.

#include <QString>

#include <cstdint>

#include "run_status.h"

namespace mantissa {

// "2.3026"; "NaN" or "inf" for a loss that was recorded so (a diverged run), "–" for none.
QString format_loss(double loss, bool recorded = true);
// A loss as a CSV export writes it: every digit, "nan" / "inf" / "-inf" as the CLI's CSV, and
// empty for none (an empty cell for a diverged run read as one never evaluated).
QString exact_loss(double loss, bool recorded);
QString format_delta(double delta);        // "+0.0123", "−0.0040", "0", "–"
QString format_ratio(double ratio);        // "0.98×", "–"
QString format_rate(double tokens_per_s);  // "12.3k", "950", "–"
QString format_bytes(int64_t bytes);       // "812 MiB", "1.42 GiB", "–" for negative
QString format_status(RunStatus status);   // "finished", "interrupted", ...
// A store timestamp ("2026-11-30T14:05:09Z", UTC) in local time: "2026-11-30 15:05".
QString format_created(const QString& utc);
// "#12 addition [precision.preset=bf16]": how plots and tables name a run.
QString run_label(int64_t id, const QString& name);
// "1 run", "3 runs": English plurals without a translation file.
QString count_text(int64_t n, const QString& one, const QString& many);

} // namespace mantissa

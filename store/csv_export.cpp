// SPDX-License-Identifier: GPL-3.0-or-later
#include "csv_export.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <vector>

namespace mantissa {

namespace {

// Collects the text and hands it on in pieces of about this size: one sink call (a write(2)
// for a file) per row would cost more than the row.
constexpr size_t kPieceBytes = 64 * 1024;

class PieceWriter {
public:
    explicit PieceWriter(const TextSink& sink) : sink_(sink) { text_.reserve(kPieceBytes + 4096); }
    PieceWriter& operator<<(std::string_view s)
    {
        text_ += s;
        return *this;
    }
    PieceWriter& operator<<(char c)
    {
        text_ += c;
        return *this;
    }
    PieceWriter& operator<<(int64_t v) { return number(v); }
    void end_row()
    {
        text_ += '\n';
        if (text_.size() >= kPieceBytes) flush();
    }
    void flush()
    {
        if (!text_.empty()) sink_(text_);
        text_.clear();
    }
    // The shortest text that reads back as the same double: 9 significant digits lost the last
    // bits of FP64 values (a loss averaged over micro-batches), so two exports of runs that
    // differ there compared equal. NaN (and Inf) as "nan", "inf", "-inf".
    PieceWriter& value(double v) { return number(v); }
    // Quoted where it holds a comma, quote or line break. Text that a spreadsheet would run as
    // a formula (a model's sample that starts with "=HYPERLINK(") gets a leading apostrophe, as
    // the GUI's table exports do (ui/common/table_export.cpp); numbers such as -0.5 stay as
    // they are.
    PieceWriter& field(std::string_view s)
    {
        const bool formula = !s.empty() && std::string_view("=+-@\t\r").find(s.front()) != std::string_view::npos &&
                             !is_number(s);
        if (s.find_first_of(",\"\n\r") == std::string_view::npos) {
            if (formula) text_ += '\'';
            return *this << s;
        }
        text_ += '"';
        if (formula) text_ += '\'';
        for (const char c : s) {
            if (c == '"') text_ += '"';
            text_ += c;
        }
        text_ += '"';
        return *this;
    }

private:
    static bool is_number(std::string_view s)
    {
        double v = 0;
        const char* first = s.data() + (s.front() == '+' ? 1 : 0); // from_chars takes no '+'
        const auto [end, ec] = std::from_chars(first, s.data() + s.size(), v);
        return ec == std::errc() && end == s.data() + s.size();
    }
    template <class T> PieceWriter& number(T v)
    {
        char digits[32];
        const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
        return *this << (ec == std::errc() ? std::string_view(digits, end - digits) : std::string_view("nan"));
    }
    const TextSink& sink_;
    std::string text_;
};

std::vector<std::string> metric_columns(RunStore& store, int64_t run_id)
{
    static const std::vector<std::string> preferred = {"train/loss", "val/loss",     "eval/train_loss",
                                                       "lr",         "grad_norm",    "step_time_ms",
                                                       "tokens_per_s", "loss_scale", "skipped"};
    const std::vector<std::string> tags = store.scalar_tags(run_id); // sorted
    std::vector<std::string> columns;
    for (const auto& t : preferred)
        if (std::binary_search(tags.begin(), tags.end(), t)) columns.push_back(t);
    for (const auto& t : tags)
        if (std::find(preferred.begin(), preferred.end(), t) == preferred.end()) columns.push_back(t);
    return columns;
}

std::string whole(void (*write)(RunStore&, int64_t, const TextSink&), RunStore& store, int64_t run_id)
{
    std::string text;
    write(store, run_id, [&text](std::string_view piece) { text += piece; });
    return text;
}

} // namespace

void write_metrics_csv(RunStore& store, int64_t run_id, const TextSink& sink)
{
    // The columns and the rows from one view of a store a run still writes to.
    const RunStore::ReadSnapshot snapshot(store);
    const std::vector<std::string> columns = metric_columns(store, run_id);
    // Where each tag's value goes in a row: the tags sorted, as the rows of one step come.
    std::vector<std::pair<std::string, size_t>> column_of;
    for (size_t c = 0; c < columns.size(); ++c) column_of.emplace_back(columns[c], c);
    std::sort(column_of.begin(), column_of.end());

    PieceWriter out(sink);
    out << "step";
    for (const auto& c : columns) (out << ',').field(c);
    out.end_row();
    std::optional<int64_t> step; // the row being gathered
    std::vector<std::optional<double>> values(columns.size());
    const auto write_row = [&] {
        out << *step;
        for (auto& v : values) {
            out << ',';
            if (v) out.value(*v);
            v.reset();
        }
        out.end_row();
    };
    store.for_each_scalar(run_id, [&](const ScalarRow& row) {
        if (step && *step != row.step) write_row();
        step = row.step;
        const auto it = std::lower_bound(column_of.begin(), column_of.end(), row.tag,
                                         [](const auto& entry, const std::string& tag) { return entry.first < tag; });
        // A tag first recorded after the columns were read has no column (only without a snapshot:
        // a store open for writing, whose run still trains).
        if (it != column_of.end() && it->first == row.tag) values[it->second] = row.value;
    });
    if (step) write_row();
    out.flush();
}

void write_layer_stats_csv(RunStore& store, int64_t run_id, const TextSink& sink)
{
    // -1: not measured (subnormal and overflow under per-row and block scales; underflow and
    // overflow of a 16-bit tensor whose cast no row saw, whose quant_mse and quant_snr_db are
    // "nan"; the update ratio of tensors that are not weights).
    PieceWriter out(sink);
    out << "step,layer,role,format,scale,count,zeros,infs,nans,underflow,subnormal,overflow,amax,quant_mse,"
           "quant_snr_db,update_ratio";
    out.end_row();
    store.for_each_layer_stats(run_id, /*with_histograms=*/false, [&](int64_t step, const TensorStats& t) {
        out << step << ',';
        out.field(t.layer) << ',';
        out.field(t.role) << ',';
        out.field(t.format) << ',';
        out.value(t.scale) << ',' << t.count << ',' << t.zeros << ',' << t.infs << ',' << t.nans;
        for (const double v :
             {t.underflow, t.subnormal, t.overflow, t.amax, t.quant_mse, t.quant_snr_db, t.update_ratio})
            (out << ',').value(v);
        out.end_row();
    });
    out.flush();
}

void write_events_csv(RunStore& store, int64_t run_id, const TextSink& sink)
{
    // Usually a handful per thousand steps, but an FP16 run at its scale floor backs off at
    // every step: 525,000 events took 566 MB read whole.
    PieceWriter out(sink);
    out << "step,kind,message,created_at";
    out.end_row();
    store.for_each_event(run_id, [&](const EventRow& e) {
        out << e.step << ',';
        out.field(e.kind) << ',';
        out.field(e.message) << ',' << e.created_at;
        out.end_row();
    });
    out.flush();
}

std::string metrics_csv(RunStore& store, int64_t run_id) { return whole(write_metrics_csv, store, run_id); }
std::string layer_stats_csv(RunStore& store, int64_t run_id) { return whole(write_layer_stats_csv, store, run_id); }
std::string events_csv(RunStore& store, int64_t run_id) { return whole(write_events_csv, store, run_id); }

} // namespace mantissa

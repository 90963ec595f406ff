// SPDX-License-Identifier: GPL-3.0-or-later
#include "window/sweep_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QVBoxLayout>

#include <algorithm>
#include <vector>

#include "common/run_format.h"
#include "common/secondary_text.h"
#include "controller/sweep_runner.h"

namespace mantissa {

namespace {

// "0.0005,0.001,0.002": each value once (batch 1 gave "1,1,2", which the dialog refused as a
// value listed twice) and whole (6 digits left a learning rate of 3.14159265e-4 out of its
// own sweep).
QString values_around(const std::vector<double>& values)
{
    QStringList out;
    for (const double v : values) {
        const QString text = QString::number(v, 'g', QLocale::FloatingPointShortest);
        if (!out.contains(text)) out << text;
    }
    return out.join(QLatin1Char(','));
}

} // namespace

SweepDialog::SweepDialog(const ProjectConfig& base, QWidget* parent) : QDialog(parent), base_(base)
{
    setWindowTitle(tr("Sweep"));
    setMinimumWidth(560);
    auto* layout = new QVBoxLayout(this);
    auto* intro = new QLabel(tr("Run <b>%1</b> once per value of one setting, one run after another. The "
                                "project itself is not changed; the comparison opens when all runs are done.")
                                 .arg(QString::fromStdString(base.name).toHtmlEscaped()),
                             this);
    intro->setWordWrap(true);
    layout->addWidget(intro);

    auto* form = new QFormLayout;
    keyCombo_ = new QComboBox(this);
    keyCombo_->setEditable(true);
    // Each key with values worth a first sweep, put in Values when the key is picked.
    const double lr = base.optimizer.learning_rate;
    const qint64 batch = base.training.batch_size;
    const QList<QPair<QString, QString>> keys = {
        {QStringLiteral("precision.preset"), QStringLiteral("fp32,bf16,fp16,fp8-hybrid")},
        {QStringLiteral("precision.fp8.scaling"), QStringLiteral("delayed,fp8-block,nvfp4,mxfp4")},
        // The block recipes against BF16 and FP32 on any project (the recipe key alone needs an
        // FP8 one): whole precision objects, each with its defaults.
        {QStringLiteral("precision"),
         QStringLiteral(R"({"preset":"fp32"},{"preset":"bf16"},{"preset":"fp8-e4m3","fp8":{"scaling":"fp8-block"}},)"
                        R"({"preset":"fp8-e4m3","fp8":{"scaling":"nvfp4"}},)"
                        R"({"preset":"fp8-e4m3","fp8":{"scaling":"mxfp4"}})")},
        {QStringLiteral("precision.layers"), QStringLiteral(R"([],[{"match":"lm_head","format":"bf16"}])")},
        {QStringLiteral("training.seed"), QStringLiteral("1,2,3")},
        {QStringLiteral("optimizer.learning_rate"), values_around({lr / 2, lr, lr * 2})},
        {QStringLiteral("training.batch_size"),
         values_around({double(std::max<qint64>(1, batch / 2)), double(batch), double(batch * 2)})},
    };
    for (const auto& [key, values] : keys) keyCombo_->addItem(key, values);
    keyCombo_->setCurrentText(QStringLiteral("precision.preset"));
    connect(keyCombo_, &QComboBox::activated, this, [this](int index) {
        const QString values = keyCombo_->itemData(index).toString();
        if (!values.isEmpty()) valuesEdit_->setText(values);
    });
    keyCombo_->setToolTip(tr("A dotted project key, as --set takes it"));
    form->addRow(tr("&Key"), keyCombo_);
    valuesEdit_ = new QLineEdit(QStringLiteral("fp32,bf16,fp16,fp8-hybrid"), this);
    valuesEdit_->setToolTip(tr("Comma-separated; commas inside [], {} or \"\" do not split, so JSON values work"));
    form->addRow(tr("&Values"), valuesEdit_);
    nameEdit_ = new QLineEdit(SweepRunner::defaultName(), this);
    nameEdit_->setToolTip(tr("Every run is tagged sweep:NAME"));
    form->addRow(tr("&Name"), nameEdit_);
    layout->addLayout(form);

    previewLabel_ = new QLabel(this);
    previewLabel_->setObjectName(QStringLiteral("sweepPreview"));
    previewLabel_->setWordWrap(true);
    previewLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(previewLabel_);

    buttons_ = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    buttons_->button(QDialogButtonBox::Ok)->setText(tr("Start sweep"));
    connect(buttons_, &QDialogButtonBox::accepted, this, [this] {
        validate();
        if (error_.isEmpty()) accept();
    });
    connect(buttons_, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons_);

    connect(keyCombo_, &QComboBox::currentTextChanged, this, &SweepDialog::validate);
    connect(valuesEdit_, &QLineEdit::textChanged, this, &SweepDialog::validate);
    connect(nameEdit_, &QLineEdit::textChanged, this, &SweepDialog::validate);
    validate();
}

QString SweepDialog::key() const { return keyCombo_->currentText().trimmed(); }
QString SweepDialog::values() const { return valuesEdit_->text(); }
QString SweepDialog::sweepName() const { return nameEdit_->text().trimmed(); }
QString SweepDialog::previewText() const { return previewLabel_->text(); }

void SweepDialog::setTagsInUse(const std::vector<std::pair<std::string, int64_t>>& tags)
{
    tagsInUse_ = tags;
    validate();
}

void SweepDialog::validate()
{
    error_.clear();
    plans_.clear();
    if (sweepName().isEmpty())
        error_ = tr("Give the sweep a name (its runs are tagged sweep:NAME).");
    else
        SweepRunner::plan(base_, key(), values(), &plans_, &error_);
    // The plan's messages are the CLI's ("--vary KEY: ..."): here there is no such flag to name.
    static const QString flag = QStringLiteral("--vary ");
    if (error_.startsWith(flag)) error_.remove(0, flag.size());
    if (!error_.isEmpty()) plans_.clear();
    buttons_->button(QDialogButtonBox::Ok)->setEnabled(error_.isEmpty());
    if (!error_.isEmpty()) {
        const QString red = readable_colour(palette(), "#8a0015", "#ff8a8a");
        previewLabel_->setStyleSheet(QStringLiteral("QLabel { color: %1; }").arg(red));
        previewLabel_->setText(error_);
        return;
    }
    // Each run's own step count: the swept key may be training.steps itself.
    const bool sameSteps = std::all_of(plans_.begin(), plans_.end(), [&](const SweepRunPlan& p) {
        return p.config.training.steps == plans_.front().config.training.steps;
    });
    QStringList lines;
    for (size_t i = 0; i < plans_.size(); ++i) {
        QString line = QStringLiteral("%1. %2").arg(i + 1).arg(QString::fromStdString(plans_[i].name).toHtmlEscaped());
        if (!sameSteps) line += tr(", %1 steps").arg(plans_[i].config.training.steps);
        lines << line;
    }
    const QString runs = count_text(int64_t(plans_.size()), tr("run"), tr("runs"));
    const QString head = sameSteps ? tr("%1, %2 steps each").arg(runs).arg(plans_.front().config.training.steps) : runs;
    previewLabel_->setStyleSheet(QString()); // the palette's text colour
    QString taken;
    const std::string tag = "sweep:" + sweepName().toStdString();
    for (const auto& [name, runs] : tagsInUse_)
        if (name == tag)
            taken = QStringLiteral("<br><span style=\"color:%1\">")
                        .arg(readable_colour(palette(), "#8a4b00", "#ffb45a")) +
                    tr("sweep:%1 already tags %2: this sweep's runs join them under one tag.")
                        .arg(sweepName().toHtmlEscaped(), count_text(runs, tr("run"), tr("runs"))) +
                    QStringLiteral("</span>");
    previewLabel_->setText(tr("%1, tagged <b>sweep:%2</b>:<br>").arg(head, sweepName().toHtmlEscaped()) +
                           lines.join(QStringLiteral("<br>")) + taken);
}

} // namespace mantissa

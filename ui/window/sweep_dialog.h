// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Run ▸ Sweep…: which key to vary, its values and the sweep's name, validated against the
// project (SweepRunner::plan) as they are typed; OK stays disabled while the engine rejects
// them, and the reason is shown.

#include <QDialog>

#include <vector>

#include "sweep.h"

class QComboBox;
class QDialogButtonBox;
class QLabel;
class QLineEdit;

namespace mantissa {

class SweepDialog : public QDialog {
    Q_OBJECT

public:
    SweepDialog(const ProjectConfig& base, QWidget* parent = nullptr);

    QString key() const;
    QString values() const;
    QString sweepName() const;
    // The validated plans (valid after accept, or whenever error() is empty).
    const std::vector<SweepRunPlan>& plans() const { return plans_; }
    QString error() const { return error_; }
    QString previewText() const; // what the dialog says it will run (rich text)

    QComboBox* keyCombo() const { return keyCombo_; }
    QLineEdit* valuesEdit() const { return valuesEdit_; }
    QLineEdit* nameEdit() const { return nameEdit_; }
    // The store's tags and how many runs carry each: a name whose sweep:NAME tag is taken is
    // noted (its runs would join another sweep's under one tag).
    void setTagsInUse(const std::vector<std::pair<std::string, int64_t>>& tags);

private:
    void validate();

    ProjectConfig base_;
    std::vector<std::pair<std::string, int64_t>> tagsInUse_;
    std::vector<SweepRunPlan> plans_;
    QString error_;
    QComboBox* keyCombo_ = nullptr;
    QLineEdit* valuesEdit_ = nullptr;
    QLineEdit* nameEdit_ = nullptr;
    QLabel* previewLabel_ = nullptr;
    QDialogButtonBox* buttons_ = nullptr;
};

} // namespace mantissa

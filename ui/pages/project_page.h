// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The workbench's Project page: the settings tree on the left (with the engine's message for
// a refused edit under it), the per-layer precision table with preset and fill-by-pattern
// tools on the right, and the memory estimate of the recipe below the table.

#include <QString>
#include <QWidget>

#include "precision_policy.h"
#include "models/precision_table_model.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableView;
class QTreeView;

namespace mantissa {

class ChoiceDelegate;
class MemoryEstimateModel;
class ProjectDocument;
class ProjectSettingsModel;

class ProjectPage : public QWidget {
    Q_OBJECT

public:
    explicit ProjectPage(ProjectDocument* document, QWidget* parent = nullptr);

    // While a run is going the settings are fixed but the precision table stays editable:
    // formats can change live.
    // `sweep`: edits change the project only, not the sweep's runs, and the header says so.
    void setRunning(bool running, bool sweep = false);
    QString runningText() const; // the header's note while a run goes
    bool isRunning() const { return running_; }
    // Selects the layer's row in the precision table and scrolls to it.
    void selectLayer(const QString& layer);

    ProjectDocument* document() const { return document_; }
    ProjectSettingsModel* settingsModel() const { return settingsModel_; }
    PrecisionTableModel* precisionModel() const { return precisionModel_; }
    MemoryEstimateModel* memoryModel() const { return memoryModel_; }
    QTreeView* settingsView() const { return settingsView_; }
    QTableView* precisionView() const { return precisionView_; }
    QTableView* memoryView() const { return memoryView_; }
    QLabel* validationLabel() const { return validationLabel_; }                   // under the settings
    QLabel* precisionValidationLabel() const { return precisionValidationLabel_; } // under the Fill row
    QLabel* totalLabel() const { return totalLabel_; }
    QLabel* dataMessageLabel() const { return dataMessageLabel_; }
    // What the recipe asks for that its layers cannot apply (recipe_parts_left_out).
    QLabel* recipeNoteLabel() const { return recipeNoteLabel_; }
    QLabel* titleLabel() const { return titleLabel_; }
    QComboBox* presetCombo() const { return presetCombo_; }
    QPushButton* applyPresetButton() const { return applyPresetButton_; }
    QLineEdit* patternEdit() const { return patternEdit_; }
    // Forward, dgrad, wgrad, then scaling; index 0 of each is "keep".
    QComboBox* fillCombo(int which) const { return fillCombos_[which]; }
    QPushButton* fillButton() const { return fillButton_; }
    // precision.keep_last_bf16: the last N transformer blocks in BF16, edited in one step.
    QSpinBox* keepLastBf16Spin() const { return keepLastBf16Spin_; }

signals:
    void layerFormatsEdited(const QString& layer, const mantissa::GemmFormats& formats, const QString& scaling);

private:
    void applyPreset();
    void fillByPattern();
    void setKeepLastBf16(int blocks);
    void fitKeepLastBf16Suffix(int blocks);
    void refreshHeader();
    void refreshTotals();
    void showValidation(const QString& key, const QString& message); // a precision.* key: by the table

    ProjectDocument* document_;
    ProjectSettingsModel* settingsModel_;
    PrecisionTableModel* precisionModel_;
    MemoryEstimateModel* memoryModel_;
    ChoiceDelegate* delegate_;

    QLabel* titleLabel_ = nullptr;
    QLabel* pathLabel_ = nullptr;
    QLabel* runningLabel_ = nullptr;
    QTreeView* settingsView_ = nullptr;
    QLabel* validationLabel_ = nullptr;
    QLabel* precisionValidationLabel_ = nullptr;
    QComboBox* presetCombo_ = nullptr;
    QPushButton* applyPresetButton_ = nullptr;
    QLineEdit* patternEdit_ = nullptr;
    QComboBox* fillCombos_[4] = {};
    QPushButton* fillButton_ = nullptr;
    QSpinBox* keepLastBf16Spin_ = nullptr;
    QTableView* precisionView_ = nullptr;
    QTableView* memoryView_ = nullptr;
    QLabel* totalLabel_ = nullptr;
    QLabel* dataMessageLabel_ = nullptr;
    QLabel* recipeNoteLabel_ = nullptr;
    bool running_ = false;
    bool expandedOnce_ = false;
};

} // namespace mantissa

// SPDX-License-Identifier: GPL-3.0-or-later
#include "pages/runs_page.h"

#include <QAction>
#include <QApplication>
#include <QDir>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QTableView>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

#include <algorithm>
#include <set>

#include "models/run_filter_proxy.h"
#include "common/secondary_text.h"
#include "common/run_format.h"
#include "models/run_list_model.h"
#include "project_config.h"
#include "run_session.h"
#include "run_store.h"
#include "controller/store_connection.h"
#include "common/table_export.h"

namespace mantissa {

namespace {

std::vector<std::string> to_std(const QStringList& list)
{
    std::vector<std::string> out;
    for (const QString& s : list)
        if (!s.trimmed().isEmpty()) out.push_back(s.trimmed().toStdString());
    return out;
}

} // namespace

RunsPage::RunsPage(StoreConnection* store, QWidget* parent)
    : QWidget(parent), store_(store), model_(new RunListModel(this)), proxy_(new RunFilterProxyModel(this))
{
    proxy_->setSourceModel(model_);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(8, 6, 8, 6);
    layout->setSpacing(6);

    buildActions();
    auto* top = new QHBoxLayout;
    top->setSpacing(8);
    filterEdit_ = new QLineEdit(this);
    filterEdit_->setObjectName(QStringLiteral("runFilter"));
    filterEdit_->setPlaceholderText(tr("Filter by name, recipe, tag or status (all words must match)"));
    filterEdit_->setClearButtonEnabled(true);
    filterEdit_->setMinimumWidth(360);
    connect(filterEdit_, &QLineEdit::textChanged, this, [this](const QString& t) {
        proxy_->setFilterText(t);
        updateStatus();
    });
    top->addWidget(filterEdit_, 2);
    auto* bar = new QToolBar(this);
    bar->setToolButtonStyle(Qt::ToolButtonTextOnly);
    bar->setIconSize(QSize(16, 16));
    for (QAction* a : {refreshAction_, compareAction_, monitorAction_}) bar->addAction(a);
    bar->addSeparator();
    for (QAction* a : {renameAction_, tagAction_, untagAction_, deleteAction_}) bar->addAction(a);
    bar->addSeparator();
    bar->addAction(exportAction_);
    top->addWidget(bar, 0);
    top->addStretch(1);
    countLabel_ = new QLabel(this);
    countLabel_->setObjectName(QStringLiteral("runCount"));
    show_as_secondary(countLabel_);
    top->addWidget(countLabel_);
    layout->addLayout(top);

    messageLabel_ = new QLabel(this);
    messageLabel_->setObjectName(QStringLiteral("runsMessage"));
    messageLabel_->setWordWrap(true);
    messageLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    messageLabel_->hide();
    layout->addWidget(messageLabel_);

    view_ = new QTableView(this);
    view_->setObjectName(QStringLiteral("runTable"));
    view_->setModel(proxy_);
    view_->setSortingEnabled(true);
    view_->sortByColumn(RunListModel::Id, Qt::DescendingOrder); // newest first
    view_->setSelectionBehavior(QAbstractItemView::SelectRows);
    view_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    view_->setEditTriggers(QAbstractItemView::EditKeyPressed | QAbstractItemView::SelectedClicked);
    view_->setAlternatingRowColors(true);
    view_->setWordWrap(false);
    view_->setTextElideMode(Qt::ElideRight);
    view_->verticalHeader()->hide();
    view_->verticalHeader()->setDefaultSectionSize(view_->fontMetrics().height() + 8);
    view_->horizontalHeader()->setHighlightSections(false);
    view_->horizontalHeader()->setStretchLastSection(false);
    view_->setContextMenuPolicy(Qt::CustomContextMenu);
    const std::pair<int, int> widths[] = {
        {RunListModel::Id, 56},       {RunListModel::Status, 84},    {RunListModel::Created, 130},
        {RunListModel::Name, 330},    {RunListModel::Tags, 190},     {RunListModel::Recipe, 220},
        {RunListModel::Steps, 70},    {RunListModel::FinalVal, 84},  {RunListModel::BestVal, 84},
        {RunListModel::TokensPerS, 84}, {RunListModel::Skipped, 70}, {RunListModel::PeakMemory, 100}};
    // At least as wide as the longest text a column holds in this font: in pixels alone, a
    // larger font cut "2026-12-06 …" and the "Peak memory" header.
    const auto fits = [this](int column, int width) {
        const QString header = view_->model()->headerData(column, Qt::Horizontal).toString();
        const QString sample = column == RunListModel::Created      ? QStringLiteral("2026-12-06 19:34:05")
                               : column == RunListModel::PeakMemory ? QStringLiteral("1023.9 MiB")
                                                                    : QString();
        const QFontMetrics header_font(view_->horizontalHeader()->font());
        return std::max({width, header_font.horizontalAdvance(header) + 28,
                         view_->fontMetrics().horizontalAdvance(sample) + 16});
    };
    for (const auto& [column, width] : widths) view_->setColumnWidth(column, fits(column, width));
    view_->viewport()->installEventFilter(this);
    connect(view_->horizontalHeader(), &QHeaderView::sectionResized, this, [this](int column) {
        if (column != RunListModel::Name) fitNameColumn(); // a user widened another column
    });
    layout->addWidget(view_, 1);

    connect(view_, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
        if (index.column() == RunListModel::Name) return; // that is an edit
        emit openRunRequested(index.data(RunListModel::RunIdRole).toLongLong());
    });
    connect(view_, &QWidget::customContextMenuRequested, this, &RunsPage::showContextMenu);
    connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        updateActions();
        updateStatus();
    });
    connect(model_, &RunListModel::renameRequested, this,
            [this](qint64 id, const QString& name) { renameRun(id, name); });
    connect(store_, &StoreConnection::runsChanged, this, &RunsPage::refresh);

    updateActions();
    updateStatus();
}

void RunsPage::buildActions()
{
    const auto make = [this](const QString& text, const QString& tip, const QKeySequence& keys, auto slot) {
        auto* a = new QAction(text, this);
        a->setToolTip(tip);
        a->setShortcut(keys);
        a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
        connect(a, &QAction::triggered, this, slot);
        addAction(a);
        return a;
    };
    // Not QKeySequence::Refresh: that is F5 here, the window's Start, and Qt would run neither.
    refreshAction_ = make(tr("Refresh"), tr("Reload the runs from the store (Ctrl+R on this page)"),
                          QKeySequence(Qt::CTRL | Qt::Key_R), [this] { refresh(); });
    compareAction_ = make(tr("Compare"), tr("Compare the selected runs (Ctrl+Enter)"),
                          QKeySequence(Qt::CTRL | Qt::Key_Return), [this] { compareSelected(); });
    monitorAction_ = make(tr("Show in Monitor"),
                          tr("Show the selected run on the Monitor page, live while it runs (also a run that "
                             "another process trains in this store)"),
                          QKeySequence(Qt::CTRL | Qt::Key_M), [this] { showSelectedInMonitor(); });
    monitorAction_->setObjectName(QStringLiteral("showInMonitorAction"));
    renameAction_ = make(tr("Rename"), tr("Rename the current run (F2)"), QKeySequence(Qt::Key_F2),
                         [this] { editName(); });
    tagAction_ = make(tr("Tag…"), tr("Add tags to the selected runs"), QKeySequence(), [this] { askTags(); });
    untagAction_ = make(tr("Untag…"), tr("Remove a tag from the selected runs"), QKeySequence(),
                        [this] { askUntag(); });
    deleteAction_ = make(tr("Delete…"), tr("Delete the selected runs and all their metrics"),
                         QKeySequence::Delete, [this] { confirmDelete(); });
    exportAction_ = make(tr("Export CSV…"), tr("Save the table, as filtered and sorted, as CSV"), QKeySequence(),
                         [this] { askExport(); });
}

bool RunsPage::refresh()
{
    // A remote run's rows make the store say "changed" every second; a reset model would close
    // the name being typed. Read again once the editor is closed.
    const QWidget* focus = QApplication::focusWidget();
    if (focus && view_->viewport()->isAncestorOf(focus)) { // an item editor (its parent is the viewport)
        if (!refreshAfterEdit_) {
            refreshAfterEdit_ = new QTimer(this);
            refreshAfterEdit_->setSingleShot(true);
            refreshAfterEdit_->setInterval(500);
            connect(refreshAfterEdit_, &QTimer::timeout, this, [this] { refresh(); });
        }
        refreshAfterEdit_->start(); // one pending read, however many changes come meanwhile
        return true;
    }
    const std::vector<int64_t> selected = selectedRunIds();
    emptyReason_.clear();
    QString error;
    RunStore* store = store_->store(&error);
    if (!store) {
        model_->setRuns({});
        if (!store_->exists()) {
            emptyReason_ = error;
            succeed();
            updateStatus();
            return true;
        }
        return fail(error);
    }
    try {
        store->refresh_dead_runs(); // a run of another process killed since the last read
        model_->setRuns(store->list_run_summaries({}, &medianCache_));
    } catch (const std::exception& e) {
        store_->close();
        model_->setRuns({});
        return fail(tr("Cannot read the run store: %1").arg(QString::fromStdString(e.what())));
    }
    selectRuns(selected);
    succeed();
    updateStatus();
    return true;
}

void RunsPage::setTrainingRun(qint64 runId)
{
    trainingRun_ = runId;
    model_->setPausedRun(-1);
    if (!trainingTick_) {
        trainingTick_ = new QTimer(this);
        trainingTick_->setInterval(1000);
        connect(trainingTick_, &QTimer::timeout, this, [this] {
            if (isVisible()) refreshTrainingRun();
        });
    }
    if (runId >= 0) trainingTick_->start();
    else trainingTick_->stop();
    refresh();
}

void RunsPage::refreshTrainingRun()
{
    // Only the run that trains, not the whole list every second on the GUI thread: a store of
    // 2,000 runs takes 1.3 s to list uncached (`mantissa-train list`), and even with the medians
    // kept each read runs a few subqueries and a config parse per run.
    QString error;
    RunStore* store = store_->store(&error);
    if (!store || trainingRun_ < 0) return;
    try {
        RunFilter only;
        only.ids = {trainingRun_};
        auto rows = store->list_run_summaries(only, &medianCache_);
        if (rows.empty() || !model_->updateRun(std::move(rows.front()))) refresh(); // not listed yet
    } catch (const std::exception&) {
        refresh(); // says what went wrong, as a refresh does
    }
}

void RunsPage::setTrainingRunPaused(bool paused)
{
    model_->setPausedRun(paused ? trainingRun_ : -1);
    if (paused) refresh(); // the store has every step up to the pause (StoreSink flushes it)
}

void RunsPage::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    if (trainingRun_ >= 0) refresh();
}

void RunsPage::setFilterText(const QString& text) { filterEdit_->setText(text); }

std::vector<int64_t> RunsPage::selectedRunIds() const
{
    std::vector<std::pair<int, int64_t>> rows;
    for (const QModelIndex& index : view_->selectionModel()->selectedRows())
        rows.emplace_back(index.row(), index.data(RunListModel::RunIdRole).toLongLong());
    std::sort(rows.begin(), rows.end());
    std::vector<int64_t> ids;
    for (const auto& r : rows) ids.push_back(r.second);
    return ids;
}

void RunsPage::selectRuns(const std::vector<int64_t>& ids)
{
    QItemSelection selection;
    for (const int64_t id : ids) {
        const int source = model_->rowOfRun(id);
        if (source < 0) continue;
        const QModelIndex index = proxy_->mapFromSource(model_->index(source, 0));
        if (index.isValid()) selection.select(index, index);
    }
    view_->selectionModel()->select(selection, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    updateActions();
    updateStatus();
}

bool RunsPage::renameRun(int64_t id, const QString& name)
{
    const QString trimmed = name.trimmed();
    if (trimmed.isEmpty()) return fail(tr("A run name cannot be empty."));
    if (const std::string problem = run_name_problem(trimmed.toStdString()); !problem.empty())
        return fail(tr("Run %1 cannot be named so: its name %2").arg(id).arg(QString::fromStdString(problem)));
    QString error;
    RunStore* store = store_->store(&error);
    if (!store) return fail(error);
    try {
        store->rename_run(id, trimmed.toStdString());
    } catch (const std::exception& e) {
        refresh();
        return fail(tr("Cannot rename run %1: %2").arg(id).arg(QString::fromStdString(e.what())));
    }
    succeed();
    store_->notifyChanged(); // refreshes this page too
    return true;
}

bool RunsPage::deleteRuns(const std::vector<int64_t>& ids)
{
    if (ids.empty()) return fail(tr("Select the runs to delete first."));
    QString error;
    RunStore* store = store_->store(&error);
    if (!store) return fail(error);
    for (const int64_t id : ids) {
        const int row = model_->rowOfRun(id);
        if (row >= 0 && model_->run(row).status == RunStatus::Running)
            return fail(tr("Run %1 is still running: stop it before deleting it.").arg(id));
    }
    QStringList kept;
    try {
        for (const int64_t id : ids)
            for (const auto& file : delete_run_with_checkpoints(*store, id).kept) kept << QString::fromStdString(file);
    } catch (const std::exception& e) {
        store_->notifyChanged();
        return fail(tr("Cannot delete: %1").arg(QString::fromStdString(e.what())));
    }
    succeed();
    store_->notifyChanged();
    if (!kept.isEmpty()) note(tr("Deleted. Checkpoint files left in place: %1").arg(kept.join(QStringLiteral("; "))));
    return true;
}

bool RunsPage::addTags(const std::vector<int64_t>& ids, const QStringList& tags)
{
    if (ids.empty()) return fail(tr("Select the runs to tag first."));
    const auto list = to_std(tags);
    if (list.empty()) return fail(tr("Give at least one tag."));
    QString error;
    RunStore* store = store_->store(&error);
    if (!store) return fail(error);
    try {
        for (const int64_t id : ids) store->add_tags(id, list);
    } catch (const std::exception& e) {
        store_->notifyChanged();
        return fail(tr("Cannot tag: %1").arg(QString::fromStdString(e.what())));
    }
    succeed();
    store_->notifyChanged();
    return true;
}

bool RunsPage::removeTags(const std::vector<int64_t>& ids, const QStringList& tags)
{
    if (ids.empty()) return fail(tr("Select the runs to untag first."));
    QString error;
    RunStore* store = store_->store(&error);
    if (!store) return fail(error);
    try {
        for (const int64_t id : ids) store->remove_tags(id, to_std(tags));
    } catch (const std::exception& e) {
        store_->notifyChanged();
        return fail(tr("Cannot untag: %1").arg(QString::fromStdString(e.what())));
    }
    succeed();
    store_->notifyChanged();
    return true;
}

bool RunsPage::exportCsv(const QString& path)
{
    QString error;
    if (!export_model_csv(*proxy_, path, &error)) return fail(error);
    succeed();
    return true;
}

bool RunsPage::showSelectedInMonitor()
{
    const auto ids = selectedRunIds();
    if (ids.empty()) return fail(tr("Select a run to show in the Monitor."));
    succeed();
    emit showInMonitorRequested(ids.front());
    return true;
}

bool RunsPage::compareSelected()
{
    const auto ids = selectedRunIds();
    if (ids.empty()) return fail(tr("Select one or more runs to compare (Ctrl+click, Shift+click)."));
    succeed();
    emit compareRequested(QList<qint64>(ids.begin(), ids.end()));
    return true;
}

QString RunsPage::statusText() const { return countLabel_->text(); }

bool RunsPage::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == view_->viewport() && event->type() == QEvent::Resize) fitNameColumn();
    return QWidget::eventFilter(watched, event);
}

void RunsPage::fitNameColumn()
{
    QHeaderView* header = view_->horizontalHeader();
    int others = 0;
    for (int column = 0; column < header->count(); ++column)
        if (column != RunListModel::Name && !header->isSectionHidden(column)) others += header->sectionSize(column);
    const int least = view_->fontMetrics().horizontalAdvance(QLatin1Char('x')) * 24; // about 24 characters
    header->resizeSection(RunListModel::Name, std::max(least, view_->viewport()->width() - others));
}

bool RunsPage::fail(const QString& message)
{
    lastError_ = message;
    messageLabel_->setText(message);
    messageLabel_->setContentsMargins(0, 0, 0, 0); // the style sheet's padding
    messageLabel_->setStyleSheet(QStringLiteral("QLabel { color: #8a0015; background: #fdecee;"
                                                " border: 1px solid #f5c2c7; padding: 4px 8px; }"));
    messageLabel_->show();
    return false;
}

void RunsPage::note(const QString& message)
{
    messageLabel_->setText(message);
    // No style sheet: a styled label takes its colours from the application's palette, not
    // the window's (dark under --dark).
    messageLabel_->setStyleSheet(QString());
    messageLabel_->setContentsMargins(2, 4, 2, 4);
    show_as_secondary(messageLabel_);
    messageLabel_->show();
}

void RunsPage::succeed()
{
    lastError_.clear();
    if (emptyReason_.isEmpty()) {
        messageLabel_->hide();
        return;
    }
    note(emptyReason_);
}

void RunsPage::updateActions()
{
    const size_t n = view_ ? view_->selectionModel()->selectedRows().size() : 0;
    compareAction_->setEnabled(n >= 1);
    monitorAction_->setEnabled(n == 1);
    renameAction_->setEnabled(n == 1);
    tagAction_->setEnabled(n >= 1);
    untagAction_->setEnabled(n >= 1);
    deleteAction_->setEnabled(n >= 1);
}

void RunsPage::updateStatus()
{
    if (!countLabel_ || !view_) return;
    const int shown = proxy_->rowCount();
    const int total = model_->rowCount();
    const auto selected = view_->selectionModel()->selectedRows().size();
    const QString runs = count_text(total, tr("run"), tr("runs"));
    QString text = shown == total ? runs : tr("%1 of %2").arg(shown).arg(runs);
    if (selected > 0) text += tr(" · %1 selected").arg(selected);
    countLabel_->setText(text);
}

void RunsPage::showContextMenu(const QPoint& pos)
{
    QMenu menu(this);
    for (QAction* a : {compareAction_, monitorAction_, renameAction_, tagAction_, untagAction_, deleteAction_})
        menu.addAction(a);
    menu.addSeparator();
    menu.addAction(refreshAction_);
    menu.addAction(exportAction_);
    menu.exec(view_->viewport()->mapToGlobal(pos));
}

void RunsPage::confirmDelete()
{
    const auto ids = selectedRunIds();
    if (ids.empty()) return;
    QStringList names;
    for (const int64_t id : ids) {
        const int row = model_->rowOfRun(id);
        if (row >= 0 && names.size() < 8)
            names << QStringLiteral("#%1 %2").arg(id).arg(QString::fromStdString(model_->run(row).name));
    }
    if (ids.size() > 8) names << tr("… and %1 more").arg(ids.size() - 8);
    const auto answer = QMessageBox::warning(
        this, tr("Delete runs"),
        tr("Delete %1 with all their metrics, events, layer statistics and checkpoints? This cannot be undone.\n\n%2")
            .arg(count_text(int64_t(ids.size()), tr("run"), tr("runs")), names.join(QLatin1Char('\n'))),
        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
    if (answer == QMessageBox::Yes) deleteRuns(ids);
}

void RunsPage::askTags()
{
    const auto ids = selectedRunIds();
    if (ids.empty()) return;
    bool ok = false;
    const QString text = QInputDialog::getText(this, tr("Tag runs"),
                                               tr("Tags for %1, separated by commas:")
                                                   .arg(count_text(int64_t(ids.size()), tr("run"), tr("runs"))),
                                               QLineEdit::Normal, {}, &ok);
    if (ok) addTags(ids, text.split(QLatin1Char(','), Qt::SkipEmptyParts));
}

void RunsPage::askUntag()
{
    const auto ids = selectedRunIds();
    std::set<QString> tags;
    for (const int64_t id : ids) {
        const int row = model_->rowOfRun(id);
        if (row >= 0)
            for (const auto& t : model_->run(row).tags) tags.insert(QString::fromStdString(t));
    }
    if (tags.empty()) {
        fail(tr("The selected runs carry no tags."));
        return;
    }
    bool ok = false;
    const QString tag = QInputDialog::getItem(this, tr("Untag runs"), tr("Remove this tag from the selected runs:"),
                                              QStringList(tags.begin(), tags.end()), 0, false, &ok);
    if (ok) removeTags(ids, {tag});
}

void RunsPage::askExport()
{
    const QString path = QFileDialog::getSaveFileName(this, tr("Export runs as CSV"),
                                                      QDir::home().filePath(QStringLiteral("runs.csv")),
                                                      tr("CSV files (*.csv)"));
    if (!path.isEmpty()) exportCsv(path);
}

void RunsPage::editName()
{
    const QModelIndex current = view_->currentIndex();
    if (!current.isValid()) return;
    const QModelIndex name = proxy_->index(current.row(), RunListModel::Name);
    view_->setCurrentIndex(name);
    view_->edit(name);
}

} // namespace mantissa

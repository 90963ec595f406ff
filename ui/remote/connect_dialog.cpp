// SPDX-License-Identifier: GPL-3.0-or-later
#include "remote/connect_dialog.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QVBoxLayout>

namespace mantissa {

namespace {
const char* kLastUrlKey = "remote/last_url";
}

ConnectDialog::ConnectDialog(QSettings& settings, QWidget* parent) : QDialog(parent), settings_(settings)
{
    setWindowTitle(tr("Connect to a Remote Run Store"));
    urlEdit_ = new QLineEdit(settings_.value(kLastUrlKey, QStringLiteral("http://127.0.0.1:7878")).toString(), this);
    urlEdit_->setObjectName(QStringLiteral("remoteUrl"));
    urlEdit_->setToolTip(tr("Where mantissa-train serve listens; through ssh -L this is http://127.0.0.1:PORT"));
    tokenEdit_ = new QLineEdit(this);
    tokenEdit_->setObjectName(QStringLiteral("remoteToken"));
    tokenEdit_->setEchoMode(QLineEdit::Password);
    tokenEdit_->setToolTip(tr("The 32 hex digits the server printed (also in STORE.token on the server)"));
    errorLabel_ = new QLabel(this);
    errorLabel_->setWordWrap(true);
    buttons_ = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    buttons_->button(QDialogButtonBox::Ok)->setText(tr("Connect"));
    connect(buttons_, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons_, &QDialogButtonBox::rejected, this, &QDialog::reject);

    auto* form = new QFormLayout;
    form->addRow(tr("Server:"), urlEdit_);
    form->addRow(tr("Token:"), tokenEdit_);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(errorLabel_);
    layout->addWidget(buttons_);

    connect(urlEdit_, &QLineEdit::textChanged, this, &ConnectDialog::urlEdited);
    connect(tokenEdit_, &QLineEdit::textChanged, this, &ConnectDialog::validate);
    urlEdited();
}

QUrl ConnectDialog::url() const { return QUrl(urlEdit_->text().trimmed()); }

QString ConnectDialog::token() const { return tokenEdit_->text().trimmed(); }

QString ConnectDialog::settingsKey(const QUrl& url)
{
    return QStringLiteral("remote/hosts/%1:%2/token").arg(url.host()).arg(url.port(url.scheme() == "https" ? 443 : 80));
}

void ConnectDialog::remember()
{
    settings_.setValue(kLastUrlKey, url().toString());
    settings_.setValue(settingsKey(url()), token());
}

void ConnectDialog::urlEdited()
{
    const QString known = settings_.value(settingsKey(url())).toString();
    if (!known.isEmpty()) tokenEdit_->setText(known);
    validate();
}

void ConnectDialog::validate()
{
    static const QRegularExpression hex32(QStringLiteral("^[0-9a-f]{32}$"));
    const QUrl u = url();
    if (!u.isValid() || (u.scheme() != "http" && u.scheme() != "https") || u.host().isEmpty())
        error_ = tr("The server is an address like http://127.0.0.1:7878 (https with --tls-cert).");
    else if (!u.path().isEmpty() && u.path() != "/")
        error_ = tr("The server address has no path: just http(s)://HOST:PORT.");
    else if (!hex32.match(token()).hasMatch())
        error_ = tr("The token is the 32 hex digits the server printed when it started.");
    else
        error_.clear();
    errorLabel_->setText(error_);
    buttons_->button(QDialogButtonBox::Ok)->setEnabled(error_.isEmpty());
}

} // namespace mantissa

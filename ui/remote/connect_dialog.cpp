// SPDX-License-Identifier: GPL-3.0-or-later
#include "remote/connect_dialog.h"

#include <QDialogButtonBox>
#include <QFile>
#include <QFormLayout>
#include <QHostAddress>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QVBoxLayout>

#include "common/secondary_text.h"
#include "remote/remote_mirror.h"

namespace mantissa {

namespace {
const char* kLastUrlKey = "remote/last_url";
const QString kCertificate = QStringLiteral("certificate"); // settingsKey(url, kCertificate): its pin

bool is_this_machine(const QString& host)
{
    if (host.compare(QLatin1String("localhost"), Qt::CaseInsensitive) == 0) return true;
    const QHostAddress address(host);
    return !address.isNull() && address.isLoopback();
}
} // namespace

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
    certificateEdit_ = new QLineEdit(this);
    certificateEdit_->setObjectName(QStringLiteral("remoteCertificate"));
    certificateEdit_->setPlaceholderText(tr("only for a self-signed https server"));
    certificateEdit_->setToolTip(tr("The SHA-256 fingerprint of the server's certificate, as mantissa-train serve "
                                    "prints it (\"certificate: SHA-256 AB:CD:...\"): that certificate is then "
                                    "trusted, and no other"));
    errorLabel_ = new QLabel(this);
    errorLabel_->setWordWrap(true);
    warningLabel_ = new QLabel(this);
    warningLabel_->setObjectName(QStringLiteral("remoteWarning"));
    warningLabel_->setWordWrap(true);
    warningLabel_->setStyleSheet(QStringLiteral("color: %1;").arg(readable_colour(palette(), "#b35900", "#ffb45a")));
    buttons_ = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    buttons_->button(QDialogButtonBox::Ok)->setText(tr("Connect"));
    connect(buttons_, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons_, &QDialogButtonBox::rejected, this, &QDialog::reject);

    // Wide enough for a cluster host name and port, and for a pasted 95-character fingerprint to
    // read whole: at its bare size hint (about 224 px) both were cut, and so was the warning.
    const QFontMetrics metrics(certificateEdit_->font());
    urlEdit_->setMinimumWidth(metrics.horizontalAdvance(QLatin1Char('x')) * 46);
    certificateEdit_->setMinimumWidth(metrics.horizontalAdvance(QStringLiteral("AB:")) * 32);
    auto* form = new QFormLayout;
    form->addRow(tr("Server:"), urlEdit_);
    form->addRow(tr("Token:"), tokenEdit_);
    form->addRow(tr("Certificate:"), certificateEdit_);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(warningLabel_);
    layout->addWidget(errorLabel_);
    layout->addWidget(buttons_);

    connect(urlEdit_, &QLineEdit::textChanged, this, &ConnectDialog::urlEdited);
    connect(tokenEdit_, &QLineEdit::textChanged, this, &ConnectDialog::validate);
    connect(certificateEdit_, &QLineEdit::textChanged, this, &ConnectDialog::validate);
    urlEdited();
}

QUrl ConnectDialog::url() const { return QUrl(urlEdit_->text().trimmed()); }

// The server prints and compares it in lower case; one typed or pasted in upper case is the same token.
QString ConnectDialog::token() const { return tokenEdit_->text().trimmed().toLower(); }

QByteArray ConnectDialog::certificateSha256() const
{
    return RemoteMirror::parseFingerprint(certificateEdit_->text());
}

QString ConnectDialog::settingsKey(const QUrl& url, const QString& what)
{
    return QStringLiteral("remote/hosts/%1:%2/%3")
        .arg(url.host())
        .arg(url.port(url.scheme() == "https" ? 443 : 80))
        .arg(what);
}

void ConnectDialog::remember()
{
    settings_.setValue(kLastUrlKey, url().toString());
    settings_.setValue(settingsKey(url()), token());
    const QByteArray pin = certificateSha256();
    if (pin.isEmpty()) settings_.remove(settingsKey(url(), kCertificate));
    else settings_.setValue(settingsKey(url(), kCertificate), RemoteMirror::fingerprintText(pin));
    // The file now holds a token that steers runs: not for other users of this machine. Later
    // writes keep the mode (QSettings replaces the file with one of the same permissions).
    settings_.sync();
    const QString file = settings_.fileName();
    if (QFile::exists(file)) QFile::setPermissions(file, QFile::ReadOwner | QFile::WriteOwner);
}

void ConnectDialog::urlEdited()
{
    const QString known = settings_.value(settingsKey(url())).toString();
    if (!known.isEmpty()) tokenEdit_->setText(known);
    // A pin belongs to one server: another address shows its own, or none.
    certificateEdit_->setText(settings_.value(settingsKey(url(), kCertificate)).toString());
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
    else if (u.port() < 0) // no server listens on 80 or 443 by default: they would be another service's
        error_ = tr("The server address needs the port the server printed: http(s)://HOST:PORT (7878 by default).");
    else if (!hex32.match(token()).hasMatch())
        error_ = tr("The token is the 32 hex digits the server printed when it started.");
    else if (!certificateEdit_->text().trimmed().isEmpty() && certificateSha256().isEmpty())
        error_ = tr("The certificate is its SHA-256 fingerprint: 64 hex digits, as the server printed it.");
    else if (!certificateSha256().isEmpty() && u.scheme() != "https")
        error_ = tr("A certificate is only for https: the server was started with --tls-cert.");
    else
        error_.clear();
    warning_.clear();
    if (error_.isEmpty() && u.scheme() == "http" && !is_this_machine(u.host()))
        warning_ = tr("Unencrypted: the token and the runs cross the network in plain http, readable on the way "
                      "to %1. Serve with --tls-cert and connect with https, or tunnel with ssh -L and connect "
                      "to http://127.0.0.1:PORT.")
                       .arg(u.host());
    errorLabel_->setText(error_);
    const bool warned = warningLabel_->isVisible();
    warningLabel_->setText(warning_);
    warningLabel_->setVisible(!warning_.isEmpty());
    // A shown dialog does not grow for a wrapped label by itself: the warning's advice was cut.
    if (isVisible() && warned != warningLabel_->isVisible()) adjustSize();
    auto* ok = buttons_->button(QDialogButtonBox::Ok);
    ok->setEnabled(error_.isEmpty());
    ok->setText(warning_.isEmpty() ? tr("Connect") : tr("Connect Unencrypted"));
}

} // namespace mantissa

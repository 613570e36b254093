//! Reads an item's secret through the Secret Service's own `GetSecrets` method, for the one case
//! where the `keyring` crate's reading fails: a keyring daemon that lists an item it does not
//! serve as a D-Bus object.
//!
//! gnome-keyring reloads its keyring files when another process changes them: a second daemon
//! on another D-Bus session (`mint alias add` run under a second `dbus-run-session` with the same
//! `XDG_DATA_HOME`). After such a reload, `SearchItems` and the collection's `Items` name the new
//! item (`/org/freedesktop/secrets/collection/login/4`), but no object is exported at that path,
//! so `Item.GetSecret` answers "Object does not exist at path" for every client on that bus,
//! a fresh connection included, until the daemon restarts. The service-level `GetSecrets` finds
//! the item by path in the daemon's store and still answers: `KeyringStore::read` falls back to
//! it when, and only when, the usual read fails that way.
//!
//! Uses a `plain` session: the secret crosses the local session bus, reachable by this user only,
//! without the session encryption the `keyring` crate negotiates; it is held in wiped buffers
//! and never logged. Searches with the attributes the `keyring` crate files items under.

use std::collections::HashMap;

use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};
use zeroize::Zeroizing;

/// The secret of the one unlocked item filed under `service` and `account` (attributes
/// `service`, `username`, `target` = `default`, as the `keyring` crate writes them). `Ok(None)`
/// when no unlocked item matches or more than one does; an error when the bus or the daemon
/// fails. Blocking: drives a runtime of its own, so it must not run on a runtime thread.
pub(super) fn read(service: &str, account: &str) -> Result<Option<Zeroizing<Vec<u8>>>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime
        .block_on(read_async(service, account))
        .map_err(|e| e.to_string())
}

async fn read_async(service: &str, account: &str) -> zbus::Result<Option<Zeroizing<Vec<u8>>>> {
    let connection = zbus::Connection::session().await?;
    let secrets = zbus::Proxy::new(&connection, BUS_NAME, SERVICE_PATH, SERVICE_INTERFACE).await?;
    let attributes = HashMap::from([
        ("service", service),
        ("username", account),
        ("target", "default"),
    ]);
    let (unlocked, _locked): (Vec<OwnedObjectPath>, Vec<OwnedObjectPath>) =
        secrets.call("SearchItems", &(attributes,)).await?;
    if unlocked.len() != 1 {
        return Ok(None);
    }
    let (_, session): (OwnedValue, OwnedObjectPath) = secrets
        .call("OpenSession", &("plain", Value::from("")))
        .await?;
    let answer: zbus::Result<HashMap<OwnedObjectPath, Secret>> =
        secrets.call("GetSecrets", &(&unlocked, &session)).await;
    // The session ends with the connection as well; closing it is only tidy.
    if let Ok(proxy) =
        zbus::Proxy::new(&connection, BUS_NAME, session.as_ref(), SESSION_INTERFACE).await
    {
        let _: zbus::Result<()> = proxy.call("Close", &()).await;
    }
    Ok(answer?
        .into_values()
        .next()
        .map(|(_, _, value, _)| Zeroizing::new(value)))
}

/// A Secret Service `Secret` struct: session, parameters, value, content type.
type Secret = (OwnedObjectPath, Vec<u8>, Vec<u8>, String);

const BUS_NAME: &str = "org.freedesktop.secrets";
const SERVICE_PATH: &str = "/org/freedesktop/secrets";
const SERVICE_INTERFACE: &str = "org.freedesktop.Secret.Service";
const SESSION_INTERFACE: &str = "org.freedesktop.Secret.Session";

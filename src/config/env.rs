//! Environment overrides: `INGEST__<SECTION>__<KEY>=value` replaces one key of
//! the TOML document before serde reads it.
//!
//! Double underscores separate levels, names are case-insensitive, array
//! elements are addressed by index (`INGEST__ROUTE__0__TABLE=orders`). Under
//! `kafka.properties` a single underscore stands for a dot:
//! `INGEST__KAFKA__PROPERTIES__SASL_MECHANISMS` sets `sasl.mechanisms`. An
//! override keeps the type of the key it replaces.

use super::ConfigError;

/// Prefix of the environment variables that override config keys.
pub const ENV_PREFIX: &str = "INGEST__";

/// Applies every `INGEST__*` variable of `env` to `doc`, in name order, and
/// returns the variables applied.
pub(super) fn apply(
    doc: &mut toml::Value,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<String>, ConfigError> {
    let mut overrides: Vec<_> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    overrides.sort();
    for (var, value) in &overrides {
        apply_one(doc, var, value)?;
    }
    Ok(overrides.into_iter().map(|(var, _)| var).collect())
}

/// The variable among `vars` that set the key at `path` (as serde names it,
/// `route[0].table`) or a key above it.
pub(super) fn var_for<'a>(vars: &'a [String], path: &str) -> Option<&'a str> {
    let path = path.replace('[', ".").replace(']', "");
    vars.iter().map(String::as_str).find(|var| {
        let key = var[ENV_PREFIX.len()..]
            .to_ascii_lowercase()
            .replace("__", ".");
        path == key || path.starts_with(&format!("{key}."))
    })
}

/// Applies one `INGEST__A__B__0__C=value` override to the document.
fn apply_one(doc: &mut toml::Value, var: &str, value: &str) -> Result<(), ConfigError> {
    let env_err = |message: String| ConfigError::Env {
        var: var.to_string(),
        message,
    };
    let path: Vec<String> = var[ENV_PREFIX.len()..]
        .split("__")
        .map(|s| s.to_ascii_lowercase())
        .collect();
    if path.iter().any(String::is_empty) {
        return Err(env_err("empty path segment".into()));
    }
    let in_properties = path.len() == 3 && path[0] == "kafka" && path[1] == "properties";
    let mut node = doc;
    for (i, segment) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        let segment = if in_properties && last {
            segment.replace('_', ".")
        } else {
            segment.clone()
        };
        node = match node {
            toml::Value::Table(t) => {
                if last {
                    let new = typed_like(t.get(&segment), value, in_properties).map_err(env_err)?;
                    t.insert(segment, new);
                    return Ok(());
                }
                t.entry(segment)
                    .or_insert_with(|| toml::Value::Table(Default::default()))
            }
            toml::Value::Array(a) => {
                let idx: usize = segment
                    .parse()
                    .map_err(|_| env_err(format!("`{segment}` must be an array index")))?;
                let len = a.len();
                let slot = a
                    .get_mut(idx)
                    .ok_or_else(|| env_err(format!("index {idx} is past the {len} elements")))?;
                if last {
                    *slot = typed_like(Some(slot), value, false).map_err(env_err)?;
                    return Ok(());
                }
                slot
            }
            _ => {
                return Err(env_err(format!(
                    "`{segment}` is below a key that is not a table"
                )))
            }
        };
    }
    Ok(())
}

/// Types an override like the value it replaces; infers when the key is new.
fn typed_like(
    old: Option<&toml::Value>,
    raw: &str,
    force_string: bool,
) -> Result<toml::Value, String> {
    use toml::Value as V;
    let bad = |what: &str| format!("{raw:?} is not {what}");
    Ok(match old {
        _ if force_string => V::String(raw.into()),
        Some(V::String(_)) => V::String(raw.into()),
        Some(V::Integer(_)) => V::Integer(raw.parse().map_err(|_| bad("an integer"))?),
        Some(V::Float(_)) => V::Float(raw.parse().map_err(|_| bad("a number"))?),
        Some(V::Boolean(_)) => V::Boolean(raw.parse().map_err(|_| bad("true or false"))?),
        Some(_) => return Err("cannot override a table or an array with one value".into()),
        None => {
            if let Ok(i) = raw.parse::<i64>() {
                V::Integer(i)
            } else if let Ok(f) = raw.parse::<f64>() {
                V::Float(f)
            } else if let Ok(b) = raw.parse::<bool>() {
                V::Boolean(b)
            } else {
                V::String(raw.into())
            }
        }
    })
}

//! Reading `cfdp run`'s configuration: the embedded default, then the
//! file given with `--config`, then `CFDP_<SECTION>__<KEY>` environment
//! overrides (the `config` crate); unknown keys are refused with the key's
//! name.

use std::path::Path;

use cfdp_config::{RunConfig, DEFAULT_CONFIG};
use cfdp_control::StoreConfig;

use crate::error::RunError;

/// The rule store's parameters.
pub fn store_config(cfg: &RunConfig) -> Result<StoreConfig, RunError> {
    cfg.control.check()?;
    Ok(cfg
        .filter
        .store_config(cfg.dataplane.mode, cfg.control.max_rules)?)
}

/// Loads the embedded default, then `path` over it, then the environment.
pub fn load_config(path: Option<&Path>) -> Result<RunConfig, RunError> {
    use config::{Environment, File, FileFormat};
    let mut b =
        config::Config::builder().add_source(File::from_str(DEFAULT_CONFIG, FileFormat::Toml));
    if let Some(p) = path {
        if !p.exists() {
            return Err(RunError::ConfigMissing(p.to_path_buf()));
        }
        b = b.add_source(File::from(p).format(FileFormat::Toml));
    }
    b = b.add_source(
        Environment::with_prefix("CFDP")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true),
    );
    let what = path.map_or("embedded default".to_string(), |p| p.display().to_string());
    b.build()
        .and_then(config::Config::try_deserialize::<RunConfig>)
        .map_err(|source| RunError::ConfigLoad { what, source })
}

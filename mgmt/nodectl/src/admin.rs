//! A client of mgmtd's authenticated admin API.

use crate::dev::DevState;
use crate::devcluster::DevCluster;
use crate::{io_err, NodectlError};
use serde::{de::DeserializeOwned, Serialize};
use std::path::Path;
use std::time::Duration;

/// The admin API of a node started by `nodectl dev up --data DIR`: node `node` of a
/// local cluster, or the single node (which is node 1).
pub fn of_dev(data: &Path, node: u16) -> Result<AdminApi, NodectlError> {
    let run = data.join("run/dev.json");
    let raw = std::fs::read(&run).map_err(io_err(format!(
        "read {} (is `nodectl dev up --data {}` running?)",
        run.display(),
        data.display()
    )))?;
    if serde_json::from_slice::<DevCluster>(&raw).is_ok() {
        return crate::devcluster::admin_of(data, node);
    }
    let single: DevState = serde_json::from_slice(&raw).map_err(|e| {
        NodectlError::Usage(format!(
            "{} describes neither a node nor a local cluster: {e}",
            run.display()
        ))
    })?;
    if node != 1 {
        return Err(NodectlError::Usage(format!(
            "{} is a single node: there is no node {node}",
            data.display()
        )));
    }
    Ok(AdminApi {
        addr: single.admin,
        token: cairn_mgmtd::read_admin_token(&data.join("state"))?,
    })
}

/// Where a node's admin API is and the token it wants.
#[derive(Clone, Debug)]
pub struct AdminApi {
    pub addr: String,
    pub token: String,
}

impl AdminApi {
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, NodectlError> {
        self.send(reqwest::Method::GET, path, None::<&()>).await
    }

    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, NodectlError> {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    async fn send<B: Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, NodectlError> {
        let url = format!("http://{}{path}", self.addr);
        let mut req = reqwest::Client::new()
            .request(method, &url)
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(90));
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| NodectlError::Admin(format!("{url}: {e} (is the node running?)")))?;
        let code = resp.status();
        if !code.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(NodectlError::Admin(format!(
                "{url}: {code}: {}",
                body.trim()
            )));
        }
        resp.json()
            .await
            .map_err(|e| NodectlError::Admin(format!("{url}: bad response: {e}")))
    }
}

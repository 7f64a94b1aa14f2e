//! A client of mgmtd's authenticated admin API.

use crate::NodectlError;
use serde::{de::DeserializeOwned, Serialize};
use std::time::Duration;

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

//! Every request the controller's Kubernetes client makes, counted as client-go counts them
//! (`rest_client_requests_total{code,method,host}`): a tower layer on the client.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use kube::client::{Body, ClientBuilder};
use tower::{Layer, Service};

/// A Kubernetes client for `config` whose requests are counted.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let host: Arc<str> = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default()
        .into();
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&Counted { host })
        .build())
}

struct Counted {
    host: Arc<str>,
}

impl<S> Layer<S> for Counted {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Counting<S> {
        Counting {
            inner,
            host: self.host.clone(),
        }
    }
}

pub struct Counting<S> {
    inner: S,
    host: Arc<str>,
}

impl<S, B> Service<Request<Body>> for Counting<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> <Self as Service<Request<Body>>>::Future {
        let method = request.method().to_string();
        let host = self.host.clone();
        let call = self.inner.call(request);
        Box::pin(async move {
            let result = call.await;
            let code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            super::global().rest_request(&code, &method, &host);
            result
        })
    }
}

//! layers backend

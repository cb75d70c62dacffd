//! The simulated vLLM-like server. Its HTTP side is hyper's, deliberately sharing no code with
//! the client in `net`/`proto`, so that each side checks the other.

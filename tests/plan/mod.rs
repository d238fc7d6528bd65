mod extensions;
mod plans;

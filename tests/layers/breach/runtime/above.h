/* A runtime header, above the core. */

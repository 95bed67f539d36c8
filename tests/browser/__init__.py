"""The browser tier: the workspace page in headless Chromium (Playwright), on a stack of its own."""

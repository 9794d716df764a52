/** This package's name and version (package.json's; a unit test keeps the two equal). */
export const SDK_NAME = "@composer/worker";
export const SDK_VERSION = "0.1.0";

// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {ZooERC20} from "./ZooERC20.sol";

/// The implementation behind the zoo's proxy token: a plain ERC-20, initialised through the
/// proxy. Its danger is not here but in the proxy: the admin can swap this code for any other.
contract UpgradeableToken is ZooERC20 {
    bool private initialized;

    error AlreadyInitialized();

    constructor() {
        // The implementation itself is never used directly.
        initialized = true;
    }

    function initialize(string memory name_, string memory symbol_, uint256 supply, address holder) external {
        if (initialized) revert AlreadyInitialized();
        initialized = true;
        _init(name_, symbol_, supply, holder);
    }
}
